//! The flags of `widebag data`'s commands that read a data file (`stats`, `convert`, `pack`):
//! which file, its format and how rows are formed from it.

use std::path::PathBuf;

use clap::{Args, ValueEnum};

#[derive(Clone, Copy, ValueEnum)]
pub enum FormatArg {
    /// `label[,label…] [qid:n] idx:val … [# comment]` (svmlight).
    Libsvm,
    /// scipy.sparse CSR `.npz` (as written by `save_npz`).
    Npz,
    /// LightGCN interaction lists: `user item item …`.
    Lightgcn,
    /// Text: one document per line of a file, or one per file under a directory.
    Text,
    /// dictd database: NAME.index + NAME.dict(.dz); one document per entry.
    Dictd,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum ModeArg {
    /// One row per document, its bag of words (target: the same bag).
    Bow,
    /// One row per word: the bag of context words, the word as target.
    Cbow,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum TokensArg {
    Plain,
    /// `word/TAG` tokens (Brown corpus): tags are dropped.
    Tagged,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum LabelArg {
    /// Each document's own bag of words is its target.
    Bag,
    /// Each file of a text directory targets one class, cut from its name (`--label-chars`).
    FileName,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum OutFormat {
    Libsvm,
    Npz,
}

/// Which file and how to read it (shared by `data stats` and `data convert`).
#[derive(Args)]
pub struct SourceArgs {
    /// The data file (lightgcn: the training file; text: a file or a directory; dictd: the
    /// .index, the .dict(.dz), or their common stem).
    pub file: PathBuf,
    /// The file's format; inferred from a known extension when left out (`.svm`, `.libsvm`:
    /// libsvm; `.npz`; `.index`, `.dict`, `.dict.dz`: dictd).
    #[arg(long, value_enum)]
    pub format: Option<FormatArg>,
    /// text/dictd: bag-of-words documents or CBOW windows.
    #[arg(long, value_enum)]
    pub mode: Option<ModeArg>,
    /// cbow: context words on each side.
    #[arg(long, default_value_t = 2)]
    pub window: usize,
    /// text/dictd: least count of a vocabulary word.
    #[arg(long, default_value_t = 1)]
    pub min_count: u64,
    /// text/dictd: most vocabulary words kept (most frequent first); 0 keeps all.
    #[arg(long, default_value_t = 0)]
    pub max_vocab: usize,
    /// text/dictd: token format.
    #[arg(long, value_enum, default_value = "plain")]
    pub tokens: TokensArg,
    /// text directory: how documents are labelled (`data.label`).
    #[arg(long, value_enum, default_value = "bag")]
    pub label: LabelArg,
    /// --label file-name: the characters START,END of each file name that are its class
    /// (`data.label_chars`; Brown: 1,2, the genre letter of `ca01`); 0,0 takes the whole name.
    #[arg(long, value_delimiter = ',', default_values_t = [0, 0])]
    pub label_chars: Vec<usize>,
    /// lightgcn: the held-out file loaded alongside.
    #[arg(long)]
    pub test: Option<PathBuf>,
    /// libsvm: ids are 0-based (true) or 1-based (false); detected when unset.
    #[arg(long)]
    pub zero_based: Option<bool>,
    /// libsvm/npz/lightgcn: the input width; taken from the data when unset (an id at or beyond
    /// it is an error).
    #[arg(long)]
    pub width: Option<usize>,
    /// Skip malformed lines and report how many, instead of failing.
    #[arg(long)]
    pub skip_bad_lines: bool,
}

#[derive(Args)]
pub struct StatsArgs {
    #[command(flatten)]
    pub source: SourceArgs,
    /// Batches sampled per batch size for unique ids.
    #[arg(long, default_value_t = 20)]
    pub samples: usize,
    /// Print one JSON object on stdout.
    #[arg(long)]
    pub json: bool,
    /// Do not save the statistics (`FILE.stats.json` beside the data, or the cache directory
    /// when that is read-only).
    #[arg(long)]
    pub no_save: bool,
}

#[derive(Args)]
pub struct ConvertArgs {
    #[command(flatten)]
    pub source: SourceArgs,
    /// Output format.
    #[arg(long, value_enum)]
    pub to: OutFormat,
    /// Output file.
    pub out: PathBuf,
}

#[derive(Args)]
pub struct PackArgs {
    #[command(flatten)]
    pub source: SourceArgs,
    /// The packed dataset to write (atomically: a temporary name renamed when complete).
    pub out: PathBuf,
    /// Rows per checksummed block.
    #[arg(long, default_value_t = 4096)]
    pub block_rows: u32,
    /// Batches sampled per batch size for the unique-ids statistics kept in the header.
    #[arg(long, default_value_t = 20)]
    pub samples: usize,
    /// Print one JSON object on stdout.
    #[arg(long)]
    pub json: bool,
}
