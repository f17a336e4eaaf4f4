//! Reports people look at: a directory with an `index.md` (the tables and what they mean)
//! and one SVG plot per figure beside it, written by `--report DIR`.
//!
//! The plots are line charts drawn with `plotters` into SVG strings: a forward's cost
//! against its node count, acceptance by draft position, and the per-record speedup
//! distribution (every record's speedup, sorted: the floor a user meets is its left end).
//! Every file is written atomically, so a report is never seen half written.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use plotters::prelude::*;

use crate::cost::CostCurve;
use crate::BenchError;

/// One named line of a plot.
#[derive(Clone, Debug)]
pub struct Series {
    /// Its legend.
    pub name: String,
    /// (x, y) points, drawn in order.
    pub points: Vec<(f64, f64)>,
    /// A reference line (a floor, a ceiling, 1x): drawn thin and without markers.
    pub reference: bool,
}

impl Series {
    /// A measured line.
    pub fn new(name: impl Into<String>, points: Vec<(f64, f64)>) -> Self {
        Series {
            name: name.into(),
            points,
            reference: false,
        }
    }

    /// A reference line.
    pub fn reference(name: impl Into<String>, points: Vec<(f64, f64)>) -> Self {
        Series {
            reference: true,
            ..Series::new(name, points)
        }
    }
}

/// One figure: a line chart written to `file` (an SVG file name inside the report).
#[derive(Clone, Debug)]
pub struct Plot {
    /// The file name, `*.svg`.
    pub file: String,
    /// The caption.
    pub title: String,
    /// The x axis' label.
    pub x_label: String,
    /// The y axis' label.
    pub y_label: String,
    /// The lines.
    pub series: Vec<Series>,
}

/// A table as rows of cells, written as Markdown.
#[derive(Clone, Debug, Default)]
pub struct Table {
    /// Column headings.
    pub header: Vec<String>,
    /// Rows, each as long as the header.
    pub rows: Vec<Vec<String>>,
}

/// A heading with its text, table and plots.
#[derive(Clone, Debug, Default)]
pub struct Section {
    /// The heading.
    pub heading: String,
    /// Paragraphs above the table.
    pub text: Vec<String>,
    /// The section's table, if any.
    pub table: Option<Table>,
    /// Plots below the table.
    pub plots: Vec<Plot>,
}

/// A report: `index.md` and its plots.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// The page's title.
    pub title: String,
    /// Paragraphs under the title (what ran, on which machine, how to read it).
    pub intro: Vec<String>,
    /// The sections, in order.
    pub sections: Vec<Section>,
}

impl Report {
    /// Writes `dir/index.md` and every plot into `dir` (created if missing); returns the
    /// index's path.
    pub fn write(&self, dir: &Path) -> Result<PathBuf, BenchError> {
        let mut md = format!("# {}\n\n", self.title);
        for p in &self.intro {
            let _ = write!(md, "{p}\n\n");
        }
        for s in &self.sections {
            let _ = write!(md, "## {}\n\n", s.heading);
            for p in &s.text {
                let _ = write!(md, "{p}\n\n");
            }
            if let Some(t) = &s.table {
                md.push_str(&markdown_table(t));
                md.push('\n');
            }
            for plot in &s.plots {
                let svg = render_svg(plot)?;
                write_file(&dir.join(&plot.file), svg.as_bytes())?;
                let _ = write!(md, "![{}]({})\n\n", plot.title, plot.file);
            }
        }
        let index = dir.join("index.md");
        write_file(&index, md.as_bytes())?;
        Ok(index)
    }
}

fn write_file(path: &Path, bytes: &[u8]) -> Result<(), BenchError> {
    specdec_fs::write_atomic(path, bytes).map_err(|e| BenchError::Report(e.to_string()))
}

/// `t` as a Markdown table (cells' `|` escaped).
pub fn markdown_table(t: &Table) -> String {
    let row = |cells: &[String]| {
        let cells: Vec<String> = cells.iter().map(|c| c.replace('|', "\\|")).collect();
        format!("| {} |\n", cells.join(" | "))
    };
    let mut out = row(&t.header);
    out.push_str(&format!("|{}\n", "---|".repeat(t.header.len())));
    for r in &t.rows {
        out.push_str(&row(r));
    }
    out
}

/// The plot as an SVG document.
pub fn render_svg(plot: &Plot) -> Result<String, BenchError> {
    let err = |e: &dyn std::fmt::Display| BenchError::Report(format!("plot {}: {e}", plot.file));
    let all = plot.series.iter().flat_map(|s| s.points.iter().copied());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, 0f64, f64::MIN);
    for (x, y) in all.filter(|(x, y)| x.is_finite() && y.is_finite()) {
        (x0, x1, y0, y1) = (x0.min(x), x1.max(x), y0.min(y), y1.max(y));
    }
    if x0 > x1 {
        (x0, x1, y1) = (0.0, 1.0, 1.0);
    }
    if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    if y1 <= y0 {
        y1 = y0 + 1.0;
    }
    y1 += (y1 - y0) * 0.05;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (760, 440)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(&e))?;
        let mut chart = ChartBuilder::on(&root)
            .caption(&plot.title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(42)
            .y_label_area_size(60)
            .build_cartesian_2d(x0..x1, y0..y1)
            .map_err(|e| err(&e))?;
        chart
            .configure_mesh()
            .x_desc(plot.x_label.as_str())
            .y_desc(plot.y_label.as_str())
            .light_line_style(WHITE.mix(0.0))
            .draw()
            .map_err(|e| err(&e))?;
        let (mut measured, mut references) = (0, 0);
        for s in &plot.series {
            let color = if s.reference {
                // Reference lines in greys, darkest first, told apart by the legend.
                references += 1;
                let g = (40 + 50 * (references - 1)).min(200) as u8;
                RGBColor(g, g, g).to_rgba()
            } else {
                measured += 1;
                Palette99::pick(measured - 1).to_rgba()
            };
            let style = color.stroke_width(if s.reference { 1 } else { 2 });
            let points: Vec<(f64, f64)> = s
                .points
                .iter()
                .copied()
                .filter(|(x, y)| x.is_finite() && y.is_finite())
                .collect();
            chart
                .draw_series(LineSeries::new(points.iter().copied(), style))
                .map_err(|e| err(&e))?
                .label(s.name.as_str())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], style));
            if !s.reference && points.len() <= 64 {
                chart
                    .draw_series(points.iter().map(|&p| Circle::new(p, 3, color.filled())))
                    .map_err(|e| err(&e))?;
            }
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.4))
            .draw()
            .map_err(|e| err(&e))?;
        root.present().map_err(|e| err(&e))?;
    }
    Ok(svg)
}

/// A forward's measured cost against its node count, beside the two bounds that frame
/// it: one forward's cost (rows free, as while weights stream) and n one-node forwards
/// (rows as dear as forwards, as when compute runs out).
pub fn cost_curve_plot(curve: &CostCurve, file: &str) -> Plot {
    let points: Vec<(f64, f64)> = curve
        .points()
        .iter()
        .map(|&(n, ms)| (n as f64, ms))
        .collect();
    let one = curve.ms(1);
    let last = points.last().map_or(1.0, |p| p.0);
    let steep = points
        .iter()
        .map(|&(n, _)| (n, n * one))
        .take_while(|&(_, ms)| ms <= 1.25 * points.last().map_or(one, |p| p.1))
        .collect();
    Plot {
        file: file.into(),
        title: "Forward cost by tree size".into(),
        x_label: "nodes in the forward".into(),
        y_label: "ms per forward".into(),
        series: vec![
            Series::new("measured", points),
            Series::reference("one forward (rows free)", vec![(1.0, one), (last, one)]),
            Series::reference("n one-node forwards", steep),
        ],
    }
}

/// Acceptance by draft position: per method, the share of its decode steps whose
/// accepted path reached depth d (`accepted_by_position[d - 1]` over `steps`).
pub fn acceptance_plot(methods: &[(String, Vec<usize>, usize)], file: &str) -> Plot {
    let series = methods
        .iter()
        .filter(|(_, by, _)| !by.is_empty())
        .map(|(name, by, steps)| {
            let points = by
                .iter()
                .enumerate()
                .map(|(d, &n)| ((d + 1) as f64, n as f64 / (*steps).max(1) as f64))
                .collect();
            Series::new(name.clone(), points)
        })
        .collect();
    Plot {
        file: file.into(),
        title: "Acceptance by draft position".into(),
        x_label: "draft depth".into(),
        y_label: "share of steps accepting that deep".into(),
        series,
    }
}

/// Per-record values, sorted ascending, per method, captioned `title`: a quantile plot
/// whose left end is the lowest record and right end the highest.
pub fn distribution_plot(
    methods: &[(String, Vec<f64>)],
    file: &str,
    title: &str,
    y_label: &str,
) -> Plot {
    let series = methods
        .iter()
        .map(|(name, values)| {
            let mut s: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
            s.sort_by(f64::total_cmp);
            let n = s.len().max(1) as f64;
            let points = s
                .iter()
                .enumerate()
                .map(|(i, &v)| ((i as f64 + 0.5) / n, v))
                .collect();
            Series::new(name.clone(), points)
        })
        .collect();
    Plot {
        file: file.into(),
        title: title.into(),
        x_label: "records, lowest to highest (quantile)".into(),
        y_label: y_label.into(),
        series,
    }
}

/// Per-record speedups as a [`distribution_plot`]: its left end is the worst record (the
/// never-slower promise is about that end), with 1x and 0.95x drawn in.
pub fn speedup_distribution_plot(methods: &[(String, Vec<f64>)], file: &str, title: &str) -> Plot {
    let mut plot = distribution_plot(methods, file, title, "speedup vs plain");
    plot.x_label = "records, worst to best (quantile)".into();
    plot.series.push(Series::reference(
        "plain (1x)",
        vec![(0.0, 1.0), (1.0, 1.0)],
    ));
    plot.series
        .push(Series::reference("0.95x", vec![(0.0, 0.95), (1.0, 0.95)]));
    plot
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plot_renders_every_series_and_a_report_links_its_plots() {
        let plot = speedup_distribution_plot(
            &[
                ("auto".into(), vec![1.2, 0.97, 3.5]),
                ("model".into(), vec![]),
            ],
            "speedups.svg",
            "Per-record speedup over plain decoding",
        );
        let svg = render_svg(&plot).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..40.min(svg.len())]);
        assert!(svg.contains("auto") && svg.contains("0.95x"));
        let dir = std::env::temp_dir().join(format!("specdec-report-{}", std::process::id()));
        let report = Report {
            title: "t".into(),
            intro: vec!["what ran".into()],
            sections: vec![Section {
                heading: "h".into(),
                text: vec![],
                table: Some(Table {
                    header: vec!["a".into(), "b|c".into()],
                    rows: vec![vec!["1".into(), "2".into()]],
                }),
                plots: vec![plot],
            }],
        };
        let index = report.write(&dir).unwrap();
        let md = std::fs::read_to_string(index).unwrap();
        assert!(md.contains("| a | b\\|c |") && md.contains("](speedups.svg)"));
        assert!(dir.join("speedups.svg").exists());
        std::fs::remove_dir_all(dir).unwrap();
    }
}
