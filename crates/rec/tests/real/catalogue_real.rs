//! The MovieLens catalogue with the real default tokenizer (SmolLM2): sizes, token
//! lengths, in-position tokenization, the item-to-entry map, the cache, and the 943
//! evaluation prompts. Skips when MovieLens or the model file is unavailable.

use crate::common;

use common::{movielens, tokenizer};
use specdec_rec::recommend::{eval_cases, ItemCatalogue, Target};
use specdec_rec::split::Split;

#[test]
fn the_movielens_catalogue_has_1664_entries_for_1682_items() {
    let (Some(data), Some(tok)) = (movielens(), tokenizer()) else {
        return;
    };
    let cat = ItemCatalogue::from_dataset(data, tok).unwrap();
    assert_eq!(cat.len(), 1664);
    assert_eq!(cat.trie().len(), 1664);
    let shared = (0..cat.len())
        .filter(|&e| cat.item_ids(e).len() == 2)
        .count();
    assert_eq!(shared, 18);
    for item in &data.items {
        let e = cat.entry_of_item(item.id).expect("every item has an entry");
        assert_eq!(cat.title(e), item.title_with_year());
        assert!(cat.item_ids(e).contains(&item.id));
        assert_eq!(cat.entry_of_title(&item.title_with_year()), Some(e));
    }
    assert_eq!(cat.title(cat.entry_of_item(1).unwrap()), "Toy Story (1995)");

    let nl = cat.end_token();
    let lengths: Vec<usize> = (0..cat.len()).map(|e| cat.trie().entry(e).len()).collect();
    let mean = lengths.iter().sum::<usize>() as f64 / lengths.len() as f64;
    let max = *lengths.iter().max().unwrap();
    let longest = cat.title(lengths.iter().position(|&l| l == max).unwrap());
    eprintln!(
        "catalogue: {} entries, {:.2} tokens per entry on average (newline included), max {max} ({longest}), {} trie nodes, newline token {nl}",
        cat.len(),
        mean,
        cat.trie().nodes()
    );
    assert!((10.0..13.5).contains(&mean), "mean {mean}");
    assert!(max <= 40, "max {max}");

    // In position: the split form equals tokenizing the title and its newline together,
    // and decodes back to the text the model writes.
    let mut differ = Vec::new();
    for e in 0..cat.len() {
        let text = format!(" {}\n", cat.title(e));
        assert_eq!(tok.decode(cat.trie().entry(e), false), text);
        if tok.encode(&text, false).unwrap() != cat.trie().entry(e) {
            differ.push(cat.title(e).to_string());
        }
    }
    assert!(
        differ.is_empty(),
        "tokenized differently with the newline: {differ:?}"
    );

    // And after a real prompt: the prompt's tokens then the entry's are the tokens of the
    // prompt with the title written after it.
    let split = Split::leave_last_out(data);
    let prompt = &eval_cases(data, &split, Target::Test)[0].prompt;
    let prompt_tokens = tok.encode(prompt, false).unwrap();
    for e in 0..cat.len() {
        let whole = tok
            .encode(&format!("{prompt} {}\n", cat.title(e)), false)
            .unwrap();
        assert_eq!(
            whole,
            [&prompt_tokens[..], cat.trie().entry(e)].concat(),
            "{}",
            cat.title(e)
        );
    }
}

#[test]
fn the_cache_round_trips_on_the_real_catalogue() {
    let (Some(data), Some(tok)) = (movielens(), tokenizer()) else {
        return;
    };
    let dir =
        std::env::temp_dir().join(format!("specdec-rec-catalogue-real-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let fresh = ItemCatalogue::from_dataset(data, tok).unwrap();
    let written = ItemCatalogue::from_dataset_cached(data, tok, &dir).unwrap();
    let read = ItemCatalogue::from_dataset_cached(data, tok, &dir).unwrap();
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
    for cat in [&written, &read] {
        assert_eq!(cat.len(), fresh.len());
        assert_eq!(cat.trie().nodes(), fresh.trie().nodes());
        for e in 0..cat.len() {
            assert_eq!(cat.trie().entry(e), fresh.trie().entry(e));
            assert_eq!(
                (cat.title(e), cat.item_ids(e)),
                (fresh.title(e), fresh.item_ids(e))
            );
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn every_user_has_a_test_and_a_validation_prompt() {
    let Some(data) = movielens() else { return };
    let split = Split::leave_last_out(data);
    for target in [Target::Test, Target::Valid] {
        let cases = eval_cases(data, &split, target);
        assert_eq!(cases.len(), 943);
        assert!(cases.windows(2).all(|w| w[0].user < w[1].user));
        for c in &cases {
            // Every user has at least 18 training items: ten list lines, then `11.`.
            assert!(c.prompt.ends_with("\n11."), "{}", c.prompt);
            assert_eq!(c.prompt.lines().count(), 12);
        }
    }
    let test = &eval_cases(data, &split, Target::Test)[0];
    let valid = split.valid[0].item;
    let last_line = test.prompt.lines().nth(10).unwrap();
    let want = format!("10. {}", data.item(valid).unwrap().title_with_year());
    assert_eq!(
        last_line, want,
        "the test history ends with the validation item"
    );
    eprintln!(
        "user {} (test target {}):\n{}",
        test.user, test.target_item, test.prompt
    );
}
