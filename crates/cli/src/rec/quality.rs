//! `specdec rec quality`: relaxed knowledge against strict, as texts and downstream.

use std::path::PathBuf;

use serde::Serialize;
use specdec_rec::movielens::Dataset;
use specdec_rec::quality::{self, CtrConfig, DownstreamReport, TextComparison, TextSummary};
use specdec_rec::split::Split;
use specdec_rec::KnowledgeOutput;
use specdec_workloads::DataDirs;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Knowledge made with strict verification (the job's output JSONL).
    #[arg(long)]
    strict: PathBuf,
    /// The same records' knowledge made with relaxed verification.
    #[arg(long)]
    relaxed: PathBuf,
    /// Also run docs/recsys.md's downstream CTR check (AUC and log loss without knowledge, with
    /// strict and with relaxed) on MovieLens-100k's leave-last-out split.
    #[arg(long)]
    downstream: bool,
    /// Hashed TF-IDF buckets per knowledge text (user, item) in the downstream model.
    #[arg(long, default_value_t = CtrConfig::default().text_buckets as u64,
          value_parser = clap::value_parser!(u64).range(1..=4096))]
    text_buckets: u64,
    /// Print one JSON object (with every pair's scores) instead of tables.
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct Report {
    text: TextComparison,
    downstream: Option<DownstreamReport>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let strict = quality::read_knowledge(&args.strict)?;
    let relaxed = quality::read_knowledge(&args.relaxed)?;
    let text = quality::compare(&strict, &relaxed)?;
    let downstream = if args.downstream {
        let config = CtrConfig {
            text_buckets: args.text_buckets as usize,
            ..CtrConfig::default()
        };
        Some(downstream(&config, &strict, &relaxed)?)
    } else {
        None
    };
    let report = Report { text, downstream };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_text(&report.text);
        if let Some(d) = &report.downstream {
            println!();
            print_downstream(d);
        }
    }
    Ok(())
}

/// The downstream check on MovieLens-100k's leave-last-out split: trained on the training
/// interactions, scored on each user's validation and test interactions.
fn downstream(
    config: &CtrConfig,
    strict: &[KnowledgeOutput],
    relaxed: &[KnowledgeOutput],
) -> anyhow::Result<DownstreamReport> {
    let ds = Dataset::fetch(&DataDirs::from_env()?)?;
    let split = Split::leave_last_out(&ds);
    let heldout: Vec<_> = split.valid.iter().chain(&split.test).copied().collect();
    Ok(quality::downstream_with(
        config,
        &ds,
        &split.train,
        &heldout,
        strict,
        relaxed,
    )?)
}

fn print_text(c: &TextComparison) {
    println!(
        "{:<8} {:>6} {:>9} {:>11} {:>22} {:>22} {:>14} {:>14}",
        "records",
        "pairs",
        "same text",
        "same tokens",
        "edit dist mean/med/max",
        "ROUGE-L mean/med/min",
        "diverges at",
        "relaxed tokens"
    );
    for (name, s) in [
        ("all", &c.overall),
        ("users", &c.users),
        ("items", &c.items),
    ] {
        print_text_row(name, s);
    }
    for (which, ids) in [("strict", &c.only_strict), ("relaxed", &c.only_relaxed)] {
        if !ids.is_empty() {
            let shown: Vec<&str> = ids.iter().take(5).map(String::as_str).collect();
            let more = if ids.len() > 5 { ", ..." } else { "" };
            println!(
                "{} ids only in the {which} knowledge (left out): {}{more}",
                ids.len(),
                shown.join(", ")
            );
        }
    }
}

fn print_text_row(name: &str, s: &TextSummary) {
    if s.pairs == 0 {
        println!(
            "{name:<8} {:>6} {:>9} {:>11} {:>22} {:>22} {:>14} {:>14}",
            0, "-", "-", "-", "-", "-", "-"
        );
        return;
    }
    let d = &s.normalised_edit_distance;
    let r = &s.rouge_l;
    let diverge = if s.first_divergence.count == 0 {
        "-".to_string()
    } else {
        format!("median {:.0}", s.first_divergence.median)
    };
    println!(
        "{:<8} {:>6} {:>8.1}% {:>10.1}% {:>22} {:>22} {:>14} {:>14.1}",
        name,
        s.pairs,
        100.0 * s.identical_text_rate,
        100.0 * s.identical_tokens_rate,
        format!("{:.3}/{:.3}/{:.3}", d.mean, d.median, d.max),
        format!("{:.3}/{:.3}/{:.3}", r.mean, r.median, r.min),
        diverge,
        s.relaxed_tokens.mean,
    );
}

fn print_downstream(d: &DownstreamReport) {
    println!(
        "{:<10} {:>7} {:>9} {:>9} {:>16}",
        "knowledge", "AUC", "log loss", "features", "texts user/item"
    );
    for (name, m) in [
        ("none", &d.none),
        ("strict", &d.strict),
        ("relaxed", &d.relaxed),
    ] {
        println!(
            "{:<10} {:>7.4} {:>9.4} {:>9} {:>16}",
            name,
            m.auc,
            m.log_loss,
            m.features,
            format!("{}/{}", m.users_with_text, m.items_with_text)
        );
    }
    println!(
        "{} training rows, {} held-out pairs ({:.1}% rated >= 4); AUC relaxed - strict {:+.4}, strict - none {:+.4}",
        d.none.train_rows,
        d.none.heldout_rows,
        100.0 * d.none.heldout_positive_rate,
        d.relaxed_minus_strict_auc,
        d.strict_minus_none_auc
    );
}
