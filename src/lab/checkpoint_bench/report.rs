//! The report of `bench checkpoint`: every figure with its samples, and every ratio with
//! the figures it was computed from, so a reader (or a test) can recompute it.
use std::collections::BTreeMap;

use serde::Serialize;

/// Schema id of [`CheckpointBenchReport`].
pub const REPORT_SCHEMA: &str = "shardlift.bench.checkpoint";
/// Its version.
pub const REPORT_VERSION: u32 = 1;

/// One measured operation over the repetitions (bounds: one sample).
#[derive(Clone, Debug, Serialize)]
pub struct Figure {
    /// Bytes the operation saved, loaded or hashed.
    pub bytes: u64,
    /// Seconds of each repetition, in order.
    pub samples_s: Vec<f64>,
    /// The median of `samples_s` (the mean of the middle two for an even count).
    pub median_s: f64,
    /// The fastest sample.
    pub min_s: f64,
    /// The slowest sample.
    pub max_s: f64,
    /// `bytes / median_s / 1e6`.
    pub mb_per_s: f64,
    /// Bytes of the files the operation wrote (the median over repetitions), where it
    /// writes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes_written: Option<u64>,
}

impl Figure {
    /// The figure of `samples_s` (at least one) moving `bytes`.
    pub fn new(bytes: u64, samples_s: Vec<f64>, bytes_written: &[u64]) -> Figure {
        let median_s = median(&samples_s);
        let min_s = samples_s.iter().copied().fold(f64::INFINITY, f64::min);
        let max_s = samples_s.iter().copied().fold(0.0, f64::max);
        let mut written = bytes_written.to_vec();
        written.sort_unstable();
        Figure {
            bytes,
            mb_per_s: if median_s > 0.0 {
                bytes as f64 / median_s / 1e6
            } else {
                f64::INFINITY
            },
            samples_s,
            median_s,
            min_s,
            max_s,
            bytes_written: written.get(written.len().saturating_sub(1) / 2).copied(),
        }
    }

    /// A field by its report name (`median_s`, `min_s`, `max_s`, `bytes_written`).
    pub fn field(&self, name: &str) -> Option<f64> {
        match name {
            "median_s" => Some(self.median_s),
            "min_s" => Some(self.min_s),
            "max_s" => Some(self.max_s),
            "bytes_written" => self.bytes_written.map(|b| b as f64),
            _ => None,
        }
    }
}

/// The median of `samples` (0 when empty).
pub fn median(samples: &[f64]) -> f64 {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    match sorted.len() {
        0 => 0.0,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

/// A ratio: the sum of its numerator's figures over the sum of its denominator's, each
/// named `figures.NAME.FIELD`.
#[derive(Clone, Debug, Serialize)]
pub struct Ratio {
    /// The ratio, or null when a figure it needs was not measured.
    pub value: Option<f64>,
    /// The figures summed above the line.
    pub numerator: Vec<String>,
    /// The figures summed below the line.
    pub denominator: Vec<String>,
    /// Why `value` is null.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub missing: Option<String>,
}

/// Computes the ratio of `numerator` over `denominator` (each `(figure, field)`) from
/// `figures`; null with the first figure missing when one was not measured.
pub fn ratio(
    figures: &BTreeMap<String, Figure>,
    numerator: &[(&str, &str)],
    denominator: &[(&str, &str)],
) -> Ratio {
    let name = |(figure, field): &(&str, &str)| format!("figures.{figure}.{field}");
    let sum = |terms: &[(&str, &str)]| -> Result<f64, String> {
        terms.iter().try_fold(0.0, |acc, term @ (figure, field)| {
            figures
                .get(*figure)
                .and_then(|f| f.field(field))
                .map(|v| acc + v)
                .ok_or_else(|| format!("{} was not measured", name(term)))
        })
    };
    let (value, missing) = match (sum(numerator), sum(denominator)) {
        (Ok(top), Ok(bottom)) if bottom > 0.0 => (Some(top / bottom), None),
        (Ok(_), Ok(_)) => (None, Some("the denominator is zero".to_owned())),
        (Err(why), _) | (_, Err(why)) => (None, Some(why)),
    };
    Ratio {
        value,
        numerator: numerator.iter().map(name).collect(),
        denominator: denominator.iter().map(name).collect(),
        missing,
    }
}

/// How ShardLift stored the state.
#[derive(Clone, Debug, Serialize)]
pub struct ShardliftLayout {
    /// Bytes of every synthetic object but the last: one of the state's weight tensors.
    pub object_bytes: u64,
    /// Objects one publish installs (the model's three chunk objects and the synthetic
    /// ones), besides the manifest and the commit record.
    pub objects: u64,
    /// What the objects hold.
    pub note: String,
}

/// The Python peers' versions, as they reported them.
#[derive(Clone, Debug, Serialize)]
pub struct PeerVersions {
    /// The virtual environment the peers ran in, by its directory's name (the
    /// hash-locked environment's name carries its lock's digest); no host path.
    pub python_environment: String,
    /// `torch.__version__`.
    pub torch: String,
    /// `safetensors.__version__`.
    pub safetensors: String,
}

/// What `bench checkpoint` measured.
#[derive(Clone, Debug, Serialize)]
pub struct CheckpointBenchReport {
    /// [`REPORT_SCHEMA`].
    pub schema: &'static str,
    /// [`REPORT_VERSION`].
    pub version: u32,
    /// `--state-bytes` as given.
    pub state_bytes_requested: u64,
    /// Bytes of the state every method saved (rounded down to whole FP32 triples).
    pub state_bytes: u64,
    /// Tensors in the state (weights, first and second moments).
    pub tensors: usize,
    /// Bytes of the largest tensor.
    pub tensor_bytes_max: u64,
    /// Repetitions, interleaved (every method once per repetition).
    pub repetitions: u32,
    /// The state's seed.
    pub seed: u64,
    /// CPU cores this process may use.
    pub cores_available: usize,
    /// Threads ShardLift verifies on, and the parallel SHA-256 bound hashes on.
    pub cores_used: usize,
    /// Threads ShardLift installs objects from, and the objects-as-files bound writes from.
    pub io_threads: usize,
    /// `/proc/loadavg` when the bench started.
    pub load_average_start: String,
    /// `/proc/loadavg` when it ended.
    pub load_average_end: String,
    /// How the cold loads were made cold.
    pub cache_eviction: String,
    /// How ShardLift stored the state.
    pub shardlift_layout: ShardliftLayout,
    /// The Python peers' versions, or null when they were not run.
    pub peers: Option<PeerVersions>,
    /// Every figure by name.
    pub figures: BTreeMap<String, Figure>,
    /// Every ratio by name, naming its figures.
    pub ratios: BTreeMap<String, Ratio>,
    /// What each figure measures, and what bounds the ratios.
    pub notes: Vec<String>,
}
