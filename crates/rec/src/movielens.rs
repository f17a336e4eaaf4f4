//! MovieLens-100k as docs/recsys.md describes it: users, items and ratings from the recbole
//! wheel's `ml-100k.{user,item,inter}` files (TSV with typed headers).
//!
//! Each file is parsed into typed rows at the edge: the header must name exactly the columns
//! (and recbole types) we read, and every field must parse, or the error names the file and
//! line. The rest of the crate then works on [`Dataset`] and never re-checks.

use std::path::Path;

use specdec_workloads::DataDirs;

use crate::error::{io, RecError};

/// One MovieLens user (`ml-100k.user`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    /// The MovieLens user id.
    pub id: u32,
    /// Age in years.
    pub age: u32,
    /// `M` or `F`.
    pub gender: String,
    /// Occupation, as MovieLens names it (`technician`, `student`, ...).
    pub occupation: String,
    /// US zip code, as written (a few are not numeric).
    pub zip_code: String,
}

/// One MovieLens movie (`ml-100k.item`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Item {
    /// The MovieLens item id.
    pub id: u32,
    /// As written, leading articles moved to the end (`Ice Storm, The`).
    pub title: String,
    /// Missing for a few items.
    pub year: Option<u32>,
    /// In the order listed (the first one picks the item's group).
    pub genres: Vec<String>,
}

impl Item {
    /// The item's identifier as docs/recsys.md writes it: `Toy Story (1995)`, or the bare title
    /// when the year is missing. 18 of these strings name two item ids each.
    pub fn title_with_year(&self) -> String {
        match self.year {
            Some(y) => format!("{} ({y})", self.title),
            None => self.title.clone(),
        }
    }
}

/// One rating (`ml-100k.inter`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Rating {
    /// The rating user's id.
    pub user: u32,
    /// The rated item's id.
    pub item: u32,
    /// 1 to 5.
    pub rating: u8,
    /// When it was given, in Unix seconds.
    pub timestamp: u64,
}

/// The whole dataset, users and items sorted by id.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Dataset {
    /// Every user, by id.
    pub users: Vec<User>,
    /// Every item, by id.
    pub items: Vec<Item>,
    /// Every rating, in file order.
    pub ratings: Vec<Rating>,
}

/// The users file's name.
pub const USER_FILE: &str = "ml-100k.user";
/// The items file's name.
pub const ITEM_FILE: &str = "ml-100k.item";
/// The ratings (interactions) file's name.
pub const INTER_FILE: &str = "ml-100k.inter";

/// The header each file must have: `name:type` columns, in this order.
const USER_COLUMNS: &[&str] = &[
    "user_id:token",
    "age:token",
    "gender:token",
    "occupation:token",
    "zip_code:token",
];
const ITEM_COLUMNS: &[&str] = &[
    "item_id:token",
    "movie_title:token_seq",
    "release_year:token",
    "class:token_seq",
];
const INTER_COLUMNS: &[&str] = &[
    "user_id:token",
    "item_id:token",
    "rating:float",
    "timestamp:float",
];

impl Dataset {
    /// Reads and checks the three files in `dir`: ids unique, every rating's user and item
    /// known.
    pub fn load(dir: &Path) -> Result<Self, RecError> {
        let read = |name: &str| {
            let path = dir.join(name);
            std::fs::read_to_string(&path).map_err(io("cannot read", &path))
        };
        Self::from_parts(
            parse_users(&read(USER_FILE)?, USER_FILE)?,
            parse_items(&read(ITEM_FILE)?, ITEM_FILE)?,
            parse_ratings(&read(INTER_FILE)?, INTER_FILE)?,
        )
    }

    /// Fetches MovieLens-100k into the cache on first use (see
    /// [`specdec_workloads::movielens_100k`]) and loads it.
    pub fn fetch(dirs: &DataDirs) -> Result<Self, RecError> {
        Self::load(&specdec_workloads::movielens_100k(dirs)?)
    }

    /// Sorts users and items by id and checks that ids are unique and ratings refer to
    /// known users and items.
    pub fn from_parts(
        mut users: Vec<User>,
        mut items: Vec<Item>,
        ratings: Vec<Rating>,
    ) -> Result<Self, RecError> {
        users.sort_by_key(|u| u.id);
        items.sort_by_key(|i| i.id);
        if let Some(w) = users.windows(2).find(|w| w[0].id == w[1].id) {
            let message = format!("{USER_FILE} lists user {} twice", w[0].id);
            return Err(RecError::Invalid(message));
        }
        if let Some(w) = items.windows(2).find(|w| w[0].id == w[1].id) {
            let message = format!("{ITEM_FILE} lists item {} twice", w[0].id);
            return Err(RecError::Invalid(message));
        }
        let data = Dataset {
            users,
            items,
            ratings,
        };
        let unknown = data
            .ratings
            .iter()
            .find(|r| data.user(r.user).is_none() || data.item(r.item).is_none());
        if let Some(r) = unknown {
            return Err(RecError::Invalid(format!(
                "{INTER_FILE} rates item {} by user {}, and one of them is in no file",
                r.item, r.user
            )));
        }
        Ok(data)
    }

    /// The user with this id.
    pub fn user(&self, id: u32) -> Option<&User> {
        let i = self.users.binary_search_by_key(&id, |u| u.id).ok()?;
        Some(&self.users[i])
    }

    /// The item with this id.
    pub fn item(&self, id: u32) -> Option<&Item> {
        let i = self.items.binary_search_by_key(&id, |it| it.id).ok()?;
        Some(&self.items[i])
    }
}

fn invalid(file: &str, line: usize, message: String) -> RecError {
    RecError::Parse {
        file: file.to_string(),
        line,
        message,
    }
}

/// Parses `ml-100k.user`; `file` names the source in errors.
pub fn parse_users(text: &str, file: &str) -> Result<Vec<User>, RecError> {
    parse_tsv(text, file, USER_COLUMNS, |f| {
        let gender = f[2];
        if gender != "M" && gender != "F" {
            return Err(format!("gender {gender:?} is neither M nor F"));
        }
        Ok(User {
            id: number(f[0], "user_id")?,
            age: number(f[1], "age")?,
            gender: gender.to_string(),
            occupation: nonempty(f[3], "occupation")?.to_string(),
            zip_code: f[4].to_string(),
        })
    })
}

/// Parses `ml-100k.item`; titles are kept exactly as written.
pub fn parse_items(text: &str, file: &str) -> Result<Vec<Item>, RecError> {
    parse_tsv(text, file, ITEM_COLUMNS, |f| {
        Ok(Item {
            id: number(f[0], "item_id")?,
            title: nonempty(f[1], "movie_title")?.to_string(),
            year: year(f[2])?,
            genres: f[3].split_whitespace().map(str::to_string).collect(),
        })
    })
}

/// Parses `ml-100k.inter`. Ratings and timestamps are typed `float` but hold whole numbers.
pub fn parse_ratings(text: &str, file: &str) -> Result<Vec<Rating>, RecError> {
    parse_tsv(text, file, INTER_COLUMNS, |f| {
        let rating: u8 = number(f[2], "rating")?;
        if !(1..=5).contains(&rating) {
            return Err(format!("rating {rating} is not 1 to 5"));
        }
        Ok(Rating {
            user: number(f[0], "user_id")?,
            item: number(f[1], "item_id")?,
            rating,
            timestamp: number(f[3], "timestamp")?,
        })
    })
}

/// Checks the header against `columns`, then turns every non-blank line into a row.
fn parse_tsv<T>(
    text: &str,
    file: &str,
    columns: &[&str],
    row: impl Fn(&[&str]) -> Result<T, String>,
) -> Result<Vec<T>, RecError> {
    let mut lines = text.lines().enumerate();
    let header = lines.next().map(|(_, l)| l).unwrap_or_default();
    let got: Vec<&str> = header.split('\t').map(str::trim).collect();
    if got != columns {
        return Err(invalid(
            file,
            1,
            format!(
                "header {got:?}, expected {columns:?}",
                got = got.join(" "),
                columns = columns.join(" ")
            ),
        ));
    }
    let mut out = Vec::new();
    for (i, line) in lines {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.trim().is_empty() {
            continue;
        }
        let fields: Vec<&str> = line.split('\t').collect();
        if fields.len() != columns.len() {
            let message = format!("{} fields, expected {}", fields.len(), columns.len());
            return Err(invalid(file, i + 1, message));
        }
        out.push(row(&fields).map_err(|m| invalid(file, i + 1, m))?);
    }
    Ok(out)
}

/// recbole's file has two years that are not numbers: `unkonwn` (item 267, whose title is
/// `unkonwn` too) and `V` (item 1412, whose title already ends in `(1995)`). A year with no
/// digit at all is missing; one with digits must be a number (`199O` is an error).
fn year(s: &str) -> Result<Option<u32>, String> {
    if s.chars().any(|c| c.is_ascii_digit()) {
        number(s, "release_year").map(Some)
    } else {
        Ok(None)
    }
}

fn number<T: std::str::FromStr>(s: &str, column: &str) -> Result<T, String> {
    s.parse()
        .map_err(|_| format!("{column} {s:?} is not a whole number"))
}

fn nonempty<'a>(s: &'a str, column: &str) -> Result<&'a str, String> {
    if s.trim().is_empty() {
        Err(format!("{column} is empty"))
    } else {
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const USERS: &str =
        "user_id:token\tage:token\tgender:token\toccupation:token\tzip_code:token\n\
                         1\t24\tM\ttechnician\t85711\n\
                         2\t53\tF\tother\t94043\n";
    const ITEMS: &str =
        "item_id:token\tmovie_title:token_seq\trelease_year:token\tclass:token_seq\n\
                         1\tToy Story\t1995\tAnimation Children's Comedy\n\
                         2\tIce Storm, The\t1997\tDrama\n\
                         3\tunkonwn\tunkonwn\tunknown\n\
                         4\tLand Before Time III (1995)\tV\tAnimation\n";
    const INTER: &str = "user_id:token\titem_id:token\trating:float\ttimestamp:float\n\
                         1\t1\t5\t874965758\n\
                         2\t3\t1\t876893171\n";

    #[test]
    fn parses_the_three_files_into_typed_rows() {
        let data = Dataset::from_parts(
            parse_users(USERS, USER_FILE).unwrap(),
            parse_items(ITEMS, ITEM_FILE).unwrap(),
            parse_ratings(INTER, INTER_FILE).unwrap(),
        )
        .unwrap();
        assert_eq!(data.user(2).unwrap().occupation, "other");
        let toy = data.item(1).unwrap();
        assert_eq!(toy.genres, ["Animation", "Children's", "Comedy"]);
        assert_eq!(toy.title_with_year(), "Toy Story (1995)");
        assert_eq!(data.item(2).unwrap().title, "Ice Storm, The");
        assert_eq!(data.item(3).unwrap().year, None);
        assert_eq!(data.item(3).unwrap().title_with_year(), "unkonwn");
        let land = data.item(4).unwrap();
        assert_eq!(
            (land.year, land.title_with_year().as_str()),
            (None, "Land Before Time III (1995)")
        );
        assert_eq!(
            data.ratings[1],
            Rating {
                user: 2,
                item: 3,
                rating: 1,
                timestamp: 876893171
            }
        );
        assert!(data.user(3).is_none() && data.item(0).is_none());
    }

    fn parse_error(result: Result<impl std::fmt::Debug, RecError>) -> (String, usize, String) {
        match result.unwrap_err() {
            RecError::Parse {
                file,
                line,
                message,
            } => (file, line, message),
            e => panic!("not a parse error: {e}"),
        }
    }

    #[test]
    fn a_wrong_header_is_reported_at_line_one() {
        let text = USERS.replace("age:token", "age:float");
        let (file, line, message) = parse_error(parse_users(&text, "u.user"));
        assert_eq!((file.as_str(), line), ("u.user", 1));
        assert!(message.contains("age:float"), "{message}");
        let (_, line, _) = parse_error(parse_ratings("", "x"));
        assert_eq!(line, 1);
    }

    #[test]
    fn bad_fields_are_reported_with_their_line() {
        let bad_rating = format!("{INTER}3\t1\t6\t1\n");
        let (_, line, message) = parse_error(parse_ratings(&bad_rating, INTER_FILE));
        assert_eq!(line, 4);
        assert!(message.contains("rating 6"), "{message}");
        let year = format!("{ITEMS}5\tTypo\t199O\tDrama\n");
        let (_, line, message) = parse_error(parse_items(&year, ITEM_FILE));
        assert_eq!(line, 6);
        assert!(message.contains("release_year"), "{message}");
        let short = format!("{ITEMS}5\tNo genres\n");
        assert_eq!(parse_error(parse_items(&short, ITEM_FILE)).1, 6);
        let gender = USERS.replace("\tF\t", "\tX\t");
        assert_eq!(parse_error(parse_users(&gender, USER_FILE)).1, 3);
        let id = USERS.replace("2\t53", "two\t53");
        let (_, line, message) = parse_error(parse_users(&id, USER_FILE));
        assert_eq!(line, 3);
        assert!(message.contains("user_id"), "{message}");
    }

    #[test]
    fn unknown_ids_and_duplicates_are_refused() {
        let users = parse_users(USERS, USER_FILE).unwrap();
        let items = parse_items(ITEMS, ITEM_FILE).unwrap();
        let inter = format!("{INTER}1\t9\t3\t1\n");
        let ratings = parse_ratings(&inter, INTER_FILE).unwrap();
        let err = Dataset::from_parts(users.clone(), items.clone(), ratings).unwrap_err();
        assert!(err.to_string().contains("rates item 9 by user 1"), "{err}");
        let twice = [users.clone(), users].concat();
        let err = Dataset::from_parts(twice, items, vec![]).unwrap_err();
        assert!(err.to_string().contains("lists user 1 twice"), "{err}");
    }

    /// An item and one rating of it, as (item, its rating).
    fn item_and_rating() -> impl proptest::strategy::Strategy<Value = (Item, Rating)> {
        use proptest::prelude::*;
        let title = "[A-Za-z0-9,:'&!.()-][A-Za-z0-9 ,:'&!.()-]{0,38}[A-Za-z0-9.()!]";
        let genres = proptest::collection::vec("[A-Z][a-z'-]{0,10}", 0..4);
        let item = (
            1u32..5000,
            title,
            proptest::option::of(1900u32..2000),
            genres,
        );
        let rating = (1u32..100, 1u8..=5, 0u64..2_000_000_000);
        (item, rating).prop_map(|((id, title, year, genres), (user, rating, timestamp))| {
            let item = Item {
                id,
                title,
                year,
                genres,
            };
            let rating = Rating {
                user,
                item: id,
                rating,
                timestamp,
            };
            (item, rating)
        })
    }

    proptest::proptest! {
        /// Rows written as recbole writes them (a missing year as its `unkonwn`) parse back
        /// to themselves.
        #[test]
        fn written_rows_parse_back(rows in proptest::collection::vec(item_and_rating(), 0..20)) {
            let mut items = ITEM_COLUMNS.join("\t");
            let mut inter = INTER_COLUMNS.join("\t");
            for (item, r) in &rows {
                let year = item.year.map_or("unkonwn".to_string(), |y| y.to_string());
                let genres = item.genres.join(" ");
                items += &format!("\n{}\t{}\t{year}\t{genres}", item.id, item.title);
                inter += &format!("\n{}\t{}\t{}\t{}", r.user, r.item, r.rating, r.timestamp);
            }
            let (want_items, want_ratings): (Vec<Item>, Vec<Rating>) = rows.into_iter().unzip();
            proptest::prop_assert_eq!(parse_items(&items, ITEM_FILE).unwrap(), want_items);
            proptest::prop_assert_eq!(parse_ratings(&inter, INTER_FILE).unwrap(), want_ratings);
        }
    }

    #[test]
    fn crlf_and_blank_lines_are_tolerated() {
        let text = format!("{}\n\n", INTER.replace('\n', "\r\n"));
        assert_eq!(parse_ratings(&text, INTER_FILE).unwrap().len(), 2);
    }
}
