//! `specdec rec train-draft`: trains a small draft for speculative beam search on the
//! target's own top-K beams (AtSpeed-S, AtSpeed-R, KD or CE) and writes it as a GGUF the
//! runtime loads as a draft.
//!
//! Training users are the validation targets (docs/recsys.md): their prompts end before the
//! second-to-last item, so the test items evaluation asks for never reach training.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use clap::{Args as ClapArgs, ValueEnum};
use specdec_gguf::{dequantize, GgufFile};
use specdec_rec::recommend::{self, Target};
use specdec_train::teacher::{self, TeacherCase};
use specdec_train::{
    checkpoint_exists, load_checkpoint, save_checkpoint, to_gguf, Draft, DraftConfig, Objective,
    TeacherData, TeacherKey, TeacherUser, TrainOptions, Trainer,
};

use crate::common::ModelArgs;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ObjectiveArg {
    AtspeedS,
    AtspeedR,
    Kd,
    Ce,
}

#[derive(ClapArgs, Debug)]
pub struct Args {
    #[command(flatten)]
    pub model: ModelArgs,
    #[arg(long, value_enum)]
    pub objective: ObjectiveArg,
    /// Weight of the alignment loss against the ground truth's cross-entropy.
    #[arg(long, default_value_t = 0.5)]
    pub alpha: f64,
    /// Where to write the draft (its checkpoint goes to OUT.ckpt).
    #[arg(long)]
    pub out: PathBuf,
    /// Train on the first N users (default: all).
    #[arg(long)]
    pub users: Option<usize>,
    #[arg(long, default_value_t = 3)]
    pub epochs: usize,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Continue from OUT.ckpt.
    #[arg(long)]
    pub resume: bool,
    /// Teacher beams per user (the beam width K).
    #[arg(short = 'k', long = "top-k", default_value_t = 10)]
    pub k: usize,
    /// Users per optimiser step.
    #[arg(long, default_value_t = 4)]
    pub batch: usize,
    #[arg(long, default_value_t = 1e-3)]
    pub lr: f64,
    #[arg(long, default_value_t = 2)]
    pub layers: usize,
    #[arg(long, default_value_t = 256)]
    pub hidden: usize,
    #[arg(long, default_value_t = 4)]
    pub heads: usize,
    #[arg(long, default_value_t = 2)]
    pub kv_heads: usize,
    #[arg(long, default_value_t = 768)]
    pub ffn: usize,
    /// Checkpoint every N optimiser steps (and after every epoch).
    #[arg(long, default_value_t = 50)]
    pub checkpoint_every: usize,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let super::MovieLensSetup {
        dirs,
        data,
        split,
        path,
        loaded,
        catalogue,
    } = super::movielens_setup(&args.model)?;
    let tok = loaded.meta.tokenizer.clone();
    let mut cases = recommend::eval_cases(&data, &split, Target::Valid);
    if let Some(n) = args.users {
        cases.truncate(n);
    }
    let cases: Vec<TeacherCase> = cases
        .iter()
        .filter_map(|c| {
            let e = catalogue.entry_of_item(c.target_item)?;
            let prompt = tok.encode(&c.prompt, false).ok()?;
            Some(TeacherCase {
                user: c.user,
                prompt,
                truth: catalogue.trie().entry(e).to_vec(),
            })
        })
        .collect();
    let size = std::fs::metadata(&path)?.len();
    let stem = path
        .file_stem()
        .map_or("model".into(), |s| s.to_string_lossy().into_owned());
    let key = TeacherKey {
        model: format!("{stem} ({size} bytes)"),
        k: args.k,
        users: format!("validation targets, first {}", cases.len()),
        format: teacher::FORMAT,
    };
    let cache = dirs.cache.join("train");
    std::fs::create_dir_all(&cache)?;
    let teacher_path = cache.join(format!("teacher-{stem}-k{}-u{}.json", args.k, cases.len()));
    let teacher = match TeacherData::load_if(&teacher_path, &key)? {
        Some(t) => {
            eprintln!("teacher data: {} (cached)", teacher_path.display());
            t
        }
        None => {
            let bar = specdec_rec::progress::bar(cases.len() as u64, "users (teacher beams)");
            let t = teacher::generate(&loaded.model, catalogue.trie(), &cases, key, |i| {
                bar.set_position(i as u64)
            })?;
            bar.finish_and_clear();
            t.save(&teacher_path)?;
            eprintln!(
                "teacher data: {} ({} users)",
                teacher_path.display(),
                t.users.len()
            );
            t
        }
    };
    let objective = match args.objective {
        ObjectiveArg::AtspeedS => Objective::AtSpeedS { k: args.k },
        ObjectiveArg::AtspeedR => Objective::AtSpeedR,
        ObjectiveArg::Kd => Objective::Kd,
        ObjectiveArg::Ce => Objective::Ce,
    };
    let opts = TrainOptions {
        objective,
        alpha: args.alpha,
        learning_rate: args.lr,
        users_per_step: args.batch.max(1),
        epochs: args.epochs,
        seed: args.seed,
    };
    let target_file = GgufFile::open(&path)?;
    let ckpt = checkpoint_base(&args.out);
    let (mut trainer, at) = if args.resume && checkpoint_exists(&ckpt) {
        let (mut t, meta) = load_checkpoint(&ckpt)?;
        // More epochs may be asked for; anything else must match.
        if (TrainOptions {
            epochs: opts.epochs,
            ..meta.opts.clone()
        }) != opts
        {
            bail!(
                "{} was trained with {:?}; resume with the same options",
                ckpt.display(),
                meta.opts
            );
        }
        eprintln!(
            "resuming at epoch {}, step {} ({} steps done)",
            meta.epochs_done + 1,
            meta.steps_done,
            meta.optimizer_steps
        );
        t.opts.epochs = opts.epochs;
        (t, (meta.epochs_done, meta.steps_done))
    } else {
        let cfg = DraftConfig {
            n_layers: args.layers,
            hidden: args.hidden,
            n_heads: args.heads,
            n_kv_heads: args.kv_heads,
            ffn: args.ffn,
            ..DraftConfig::small(loaded.meta.config.vocab)
        };
        let embd = target_embedding(&target_file)?;
        let width = loaded.meta.config.hidden;
        let draft = Draft::new(cfg, args.seed, Some((&embd, width)))?;
        (Trainer::new(draft, opts)?, (0, 0))
    };
    let started = std::time::Instant::now();
    train_epochs(
        &mut trainer,
        &teacher.users,
        at,
        &ckpt,
        args.checkpoint_every.max(1),
    )?;
    eprintln!(
        "trained in {:.1} s ({} steps in all)",
        started.elapsed().as_secs_f64(),
        trainer.steps()
    );
    let name = format!("specdec draft ({}, alpha {})", objective.name(), args.alpha);
    let bytes = to_gguf(&trainer.draft, &name, Some(&target_file))?.write_to(&args.out)?;
    // The file must load as a draft of this target and compute what was trained.
    specdec_engine::load_draft(&args.out, &loaded.meta, 1)?;
    let probe = &teacher.users.first().context("no training users")?.prompt;
    let got = specdec_train::runtime_logits(&GgufFile::open(&args.out)?, probe)?;
    let want = trainer.draft.logits(probe)?.to_vec2::<f32>()?;
    let err = specdec_train::logits_relative_error(&got, &want);
    println!(
        "wrote {} ({bytes} bytes); runtime vs candle logits: max relative error {err:.4}",
        args.out.display()
    );
    Ok(())
}

/// `OUT.ckpt` beside the output.
fn checkpoint_base(out: &Path) -> PathBuf {
    let mut s = out.as_os_str().to_owned();
    s.push(".ckpt");
    PathBuf::from(s)
}

/// The target's token embedding as f32, `vocab` rows of its hidden width.
fn target_embedding(file: &GgufFile) -> anyhow::Result<Vec<f32>> {
    let t = file
        .tensor(specdec_gguf::names::TOKEN_EMBD)
        .context("the target has no token_embd.weight")?;
    let mut out = vec![0f32; t.elements() as usize];
    dequantize(t.ty, file.tensor_data(t), &mut out)?;
    Ok(out)
}

/// The epochs from `(epoch, step)` on, with a progress bar, a checkpoint every `every`
/// steps and after each epoch.
fn train_epochs(
    trainer: &mut Trainer,
    users: &[TeacherUser],
    (done, skip): (usize, usize),
    ckpt: &Path,
    every: usize,
) -> anyhow::Result<()> {
    let per = trainer.opts.users_per_step;
    let steps_per_epoch = users.len().div_ceil(per);
    let epochs = trainer.opts.epochs;
    let left = (steps_per_epoch * epochs.saturating_sub(done)).saturating_sub(skip);
    let bar = specdec_rec::progress::bar(left as u64, "steps");
    for epoch in done..epochs {
        let order = trainer.epoch_order(users.len(), epoch);
        let first = if epoch == done { skip } else { 0 };
        let (mut sum, mut n) = (0.0, 0usize);
        for (s, chunk) in order.chunks(per).enumerate().skip(first) {
            let batch: Vec<&TeacherUser> = chunk.iter().map(|&i| &users[i]).collect();
            let l = trainer.step(&batch)?;
            sum += l.total;
            n += 1;
            bar.set_message(format!(
                "epoch {}/{epochs} loss {:.4} (ce {:.4}, align {:.4}) mean {:.4}",
                epoch + 1,
                l.total,
                l.ce,
                l.align,
                sum / n as f64
            ));
            bar.inc(1);
            if (s + 1) % every == 0 && s + 1 < steps_per_epoch {
                save_checkpoint(ckpt, trainer, epoch, s + 1)?;
            }
        }
        save_checkpoint(ckpt, trainer, epoch + 1, 0)?;
        let mean = sum / n.max(1) as f64;
        bar.suspend(|| eprintln!("epoch {}: mean loss {mean:.4}", epoch + 1));
    }
    bar.finish_and_clear();
    Ok(())
}
