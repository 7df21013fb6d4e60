//! Rebuilding the states a power cut could leave from a [`Recording`]: crash points,
//! subsets of pending operations, data variants, each state once.
use super::*;

/// How many crash images to derive, and how to sample.
#[derive(Clone, Copy, Debug)]
pub struct EnumerationLimits {
    /// Enumerate all subsets when at most this many operations are pending.
    pub all_subsets_up_to: usize,
    /// Seeded random subsets per crash point when there are more.
    pub samples: usize,
    /// Seed of the sampled subsets.
    pub seed: u64,
}

impl Default for EnumerationLimits {
    fn default() -> Self {
        EnumerationLimits {
            all_subsets_up_to: 10,
            samples: 16,
            seed: 0x5eed,
        }
    }
}

/// What [`Recording::crash_states_counted`] enumerated: per crash point (every operation
/// boundary), the subsets of its pending operations it applied, out of all of them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Enumeration {
    /// Crash points (operation boundaries, the start included).
    pub crash_points: u64,
    /// Most operations pending at one crash point.
    pub max_pending: u64,
    /// Whether some crash point had more pending operations than
    /// [`EnumerationLimits::all_subsets_up_to`], so only some of its subsets were applied
    /// (prefixes, all-but-one and seeded samples): the enumeration is then not exhaustive.
    pub sampled: bool,
    /// Distinct subsets of pending operations applied, summed over the crash points.
    pub subsets_checked: u64,
    /// Subsets of pending operations there are, summed over the crash points (2^pending
    /// each), saturating at `u64::MAX`. Equal to `subsets_checked` when not `sampled`.
    pub subsets_total: u64,
}

impl Enumeration {
    pub(super) fn add_crash_point(
        &mut self,
        pending: usize,
        tried: usize,
        limits: EnumerationLimits,
    ) {
        self.crash_points += 1;
        self.max_pending = self.max_pending.max(pending as u64);
        self.sampled |= pending > limits.all_subsets_up_to;
        self.subsets_checked = self.subsets_checked.saturating_add(tried as u64);
        let all = if pending < 64 {
            1u64 << pending
        } else {
            u64::MAX
        };
        self.subsets_total = self.subsets_total.saturating_add(all);
    }
}

/// A crash image together with the crash point it came from.
#[derive(Clone, Debug)]
pub struct CrashState {
    /// Operations issued before the crash.
    pub crash_point: usize,
    /// The image recovery is run on.
    pub image: Image,
}

impl Recording {
    /// `path` (relative to the recorded directory) relative to the store root, if it is
    /// the root or below it.
    pub fn in_store<'p>(&self, path: &'p str) -> Option<&'p str> {
        if self.store.is_empty() {
            return Some(path);
        }
        if path == self.store {
            return Some("");
        }
        path.strip_prefix(self.store.as_str())?.strip_prefix('/')
    }

    /// `rel` (relative to the store root, `/`-separated) relative to the recorded
    /// directory.
    pub fn store_path(&self, rel: &str) -> String {
        match (self.store.is_empty(), rel.is_empty()) {
            (true, _) => rel.to_owned(),
            (false, true) => self.store.clone(),
            (false, false) => format!("{}/{rel}", self.store),
        }
    }

    /// Whether `path` (relative to the recorded directory) is the store's `staging/` or
    /// inside it: recovery never reads there.
    fn in_staging(&self, path: &str) -> bool {
        self.in_store(path)
            .is_some_and(|rel| rel == STAGING_DIR || rel.starts_with("staging/"))
    }

    /// Whether an image holds the store root (a directory).
    pub fn has_store_root(&self, image: &Image) -> bool {
        self.store.is_empty() || image.get(&self.store) == Some(&ImageEntry::Dir)
    }

    /// Whether `inode` is a file of the durable starting image (not written by the run nor
    /// by a killed writer before it).
    pub fn is_initial_inode(&self, inode: usize) -> bool {
        self.initial
            .values()
            .any(|entry| matches!(entry, ImageEntry::File { inode: i, .. } if *i == inode))
    }

    /// Whether the file `inode` is one an earlier, killed writer left before the run
    /// (a pre-run create) whose data no operation of `ops[..crash_point]` fsynced: its
    /// torn bytes are that writer's, not the run's.
    pub fn torn_by_earlier_writer(&self, inode: usize, crash_point: usize) -> bool {
        let pre_run = &self.ops[..self.pre_run_ops.min(self.ops.len())];
        let created_before = pre_run
            .iter()
            .any(|op| matches!(op, Op::Create { inode: i, .. } if *i == inode));
        if !created_before {
            return false;
        }
        !self.ops[..crash_point.min(self.ops.len())]
            .iter()
            .any(|op| matches!(op, Op::FsyncFile { inode: i } if *i == inode))
    }

    /// Every distinct crash image over all crash points, pending subsets and data variants.
    pub fn crash_states(&self, limits: EnumerationLimits) -> Vec<CrashState> {
        self.crash_states_counted(limits).0
    }

    /// As [`Recording::crash_states`], with what was enumerated to get them.
    pub fn crash_states_counted(
        &self,
        limits: EnumerationLimits,
    ) -> (Vec<CrashState>, Enumeration) {
        let mut enumeration = Enumeration::default();
        // Each image once, at the latest crash point that produces it: the checks that
        // depend on the crash point (a generation must survive once its commits/ fsync was
        // issued) are strictest there.
        let mut seen: HashMap<Image, usize> = HashMap::new();
        // A namespace with the same volatile files yields the same data variants wherever
        // it recurs, so each is expanded once; where it recurs, its images move to the
        // later crash point.
        let mut expanded: HashMap<Expansion, Vec<usize>> = HashMap::new();
        let mut out: Vec<CrashState> = Vec::new();
        let mut rng = SplitMix64::keyed(limits.seed, "shardlift/powerloss/subsets", 0);
        for crash_point in 0..=self.ops.len() {
            let prefix = &self.ops[..crash_point];
            let (durable, pending) = self.classify(prefix);
            let tried = subsets(pending.len(), limits, &mut rng);
            enumeration.add_crash_point(pending.len(), tried.len(), limits);
            for subset in tried {
                let chosen: HashSet<usize> = subset.iter().map(|&i| pending[i]).collect();
                let namespace = self.apply(prefix, &durable, &chosen);
                let volatile = self.volatile_files(prefix, &namespace);
                let key = (namespace, volatile);
                if let Some(indices) = expanded.get(&key) {
                    for &index in indices {
                        out[index].crash_point = crash_point;
                    }
                    continue;
                }
                let every_pending_applied = subset.len() == pending.len();
                let mut indices = Vec::new();
                for image in self.data_variants(&key.0, &key.1, every_pending_applied) {
                    let index = match seen.get(&image) {
                        Some(&index) => {
                            out[index].crash_point = crash_point;
                            index
                        }
                        None => {
                            seen.insert(image.clone(), out.len());
                            out.push(CrashState { crash_point, image });
                            out.len() - 1
                        }
                    };
                    indices.push(index);
                }
                expanded.insert(key, indices);
            }
        }
        (out, enumeration)
    }

    /// Which metadata ops of the prefix are durable, and the indices of pending ones.
    /// Pending operations on names inside `staging/` are applied in every image instead of
    /// multiplying images: recovery never looks there (RFC 0001 §5; the scenarios start
    /// from a `staging/` holding a killed writer's garbage to show it), so images that
    /// differ only there are one state to recovery.
    fn classify(&self, prefix: &[Op]) -> (Vec<bool>, Vec<usize>) {
        let mut durable = vec![false; prefix.len()];
        let mut pending = Vec::new();
        for (i, op) in prefix.iter().enumerate() {
            let Some(dir) = op.durable_in() else {
                continue;
            };
            if self.in_staging(dir) {
                durable[i] = true;
                continue;
            }
            let synced = prefix[i + 1..]
                .iter()
                .any(|later| matches!(later, Op::FsyncDir { path } if path == dir));
            if synced {
                durable[i] = true;
            } else {
                pending.push(i);
            }
        }
        (durable, pending)
    }

    fn apply(
        &self,
        prefix: &[Op],
        durable: &[bool],
        chosen: &HashSet<usize>,
    ) -> BTreeMap<String, Node> {
        let mut names: BTreeMap<String, Node> = self
            .initial
            .iter()
            .map(|(k, v)| {
                let node = match v {
                    ImageEntry::Dir => Node::Dir,
                    ImageEntry::File { inode, .. } => Node::File(*inode),
                };
                (k.clone(), node)
            })
            .collect();
        for (i, op) in prefix.iter().enumerate() {
            if !(durable[i] || chosen.contains(&i)) {
                continue;
            }
            match op {
                Op::Mkdir { path } => {
                    names.insert(path.clone(), Node::Dir);
                }
                Op::Create { path, inode } => {
                    names.insert(path.clone(), Node::File(*inode));
                }
                Op::Rename { from, to, inode } => {
                    if names.get(from) == Some(&Node::File(*inode)) {
                        names.remove(from);
                    }
                    names.insert(to.clone(), Node::File(*inode));
                }
                Op::Remove { path } => {
                    names.remove(path);
                }
                Op::FsyncFile { .. } | Op::FsyncDir { .. } => {}
            }
        }
        // Entries whose parent directory is absent are lost (BTreeMap order visits
        // parents before children).
        let mut reachable: BTreeMap<String, Node> = BTreeMap::new();
        for (path, node) in names {
            let p = parent(&path);
            if p.is_empty() || reachable.get(p) == Some(&Node::Dir) {
                reachable.insert(path, node);
            }
        }
        reachable
    }

    /// Files of `names` whose data a crash may lose or tear: created by this run and not
    /// fsynced in `prefix`. Files in `staging/` are left whole: recovery never reads them.
    fn volatile_files(
        &self,
        prefix: &[Op],
        names: &BTreeMap<String, Node>,
    ) -> Vec<(String, usize)> {
        let initial_inodes: HashSet<usize> = self
            .initial
            .values()
            .filter_map(|e| match e {
                ImageEntry::File { inode, .. } => Some(*inode),
                ImageEntry::Dir => None,
            })
            .collect();
        let synced: HashSet<usize> = prefix
            .iter()
            .filter_map(|op| match op {
                Op::FsyncFile { inode } => Some(*inode),
                _ => None,
            })
            .collect();
        names
            .iter()
            .filter_map(|(path, node)| match node {
                Node::File(inode)
                    if !initial_inodes.contains(inode)
                        && !synced.contains(inode)
                        && !self.in_staging(path) =>
                {
                    Some((path.clone(), *inode))
                }
                _ => None,
            })
            .collect()
    }

    /// The images of one namespace: every file whole, every volatile file empty, and (with
    /// `each_torn`) each volatile file alone short or zero-filled. Each-torn variants are
    /// taken where every pending operation happened, the namespace with the most names
    /// visible; tearing them in every subset too multiplies images past what a run can
    /// check while showing recovery the same torn files.
    fn data_variants(
        &self,
        names: &BTreeMap<String, Node>,
        volatile: &[(String, usize)],
        each_torn: bool,
    ) -> Vec<Image> {
        let full: Image = names
            .iter()
            .map(|(path, node)| {
                let entry = match node {
                    Node::Dir => ImageEntry::Dir,
                    Node::File(inode) => ImageEntry::File {
                        inode: *inode,
                        len: self.inodes[*inode].len(),
                        zeroed_from: None,
                    },
                };
                (path.clone(), entry)
            })
            .collect();
        let mut variants = vec![full.clone()];
        let mut all_empty = full.clone();
        for (path, inode) in volatile {
            let len = self.inodes[*inode].len();
            let file = |len, zeroed_from| ImageEntry::File {
                inode: *inode,
                len,
                zeroed_from,
            };
            // Short: only the first sectors (or none) reached the disk.
            let mut lengths = vec![0usize];
            for boundary in [512usize, 4096] {
                if len > boundary {
                    lengths.push((len - 1) / boundary * boundary);
                }
            }
            lengths.sort_unstable();
            lengths.dedup();
            let mut torn: Vec<ImageEntry> = lengths.into_iter().map(|l| file(l, None)).collect();
            // Zero-filled: the size reached the disk, the last 4 KiB sector's data (or all
            // of it) did not.
            if len > 0 {
                torn.push(file(len, Some(0)));
                if len > 4096 {
                    torn.push(file(len, Some((len - 1) / 4096 * 4096)));
                }
            }
            for entry in torn.into_iter().filter(|_| each_torn) {
                let mut image = full.clone();
                image.insert(path.clone(), entry);
                variants.push(image);
            }
            all_empty.insert(path.clone(), file(0, None));
        }
        if volatile.len() > 1 {
            variants.push(all_empty);
        }
        variants
    }

    /// What recovery can see of an image: every entry outside `staging/` with its kind and
    /// bytes. Two images with the same digest are one state to recovery.
    pub fn visible_digest(&self, image: &Image) -> Digest {
        let mut hasher = FramedHasher::new("shardlift/powerloss/visible-image/v1");
        for (path, entry) in image {
            if self.in_staging(path) {
                continue;
            }
            hasher.field(path.as_bytes());
            match entry {
                ImageEntry::Dir => {
                    hasher.field(b"<dir>");
                }
                ImageEntry::File { .. } => {
                    match self.file_bytes(image, path) {
                        Some(bytes) => hasher.field(&bytes),
                        None => hasher.field(b"<bad inode>"),
                    };
                }
            }
        }
        hasher.finish()
    }

    /// The bytes an image holds at `path`, if it is a file.
    pub fn file_bytes<'a>(&'a self, image: &Image, path: &str) -> Option<Cow<'a, [u8]>> {
        match image.get(path)? {
            ImageEntry::File {
                inode,
                len,
                zeroed_from,
            } => {
                let bytes = self.inodes.get(*inode)?.get(..*len)?;
                match zeroed_from {
                    None => Some(Cow::Borrowed(bytes)),
                    Some(from) => {
                        let mut owned = bytes.to_vec();
                        owned.get_mut(*from..)?.fill(0);
                        Some(Cow::Owned(owned))
                    }
                }
            }
            ImageEntry::Dir => None,
        }
    }

    /// Writes an image as a real directory tree under `dir` (which must exist, empty).
    pub fn materialize(&self, image: &Image, dir: &Path) -> std::io::Result<()> {
        for (path, entry) in image {
            let target = dir.join(path);
            match entry {
                ImageEntry::Dir => std::fs::create_dir(&target)?,
                ImageEntry::File { .. } => {
                    let data = self
                        .file_bytes(image, path)
                        .ok_or_else(|| std::io::Error::other("bad inode"))?;
                    std::fs::write(&target, data)?;
                }
            }
        }
        Ok(())
    }

    /// Operation count at the first occurrence of `barrier`, if reached.
    pub fn mark_of(&self, barrier: Barrier) -> Option<usize> {
        self.marks
            .iter()
            .find(|(b, _)| *b == barrier)
            .map(|(_, at)| *at)
    }
}

/// Index subsets of `0..n` to try.
pub(crate) fn subsets(
    n: usize,
    limits: EnumerationLimits,
    rng: &mut SplitMix64,
) -> Vec<Vec<usize>> {
    if n <= limits.all_subsets_up_to {
        return (0u32..(1u32 << n))
            .map(|mask| (0..n).filter(|i| mask & (1 << i) != 0).collect())
            .collect();
    }
    let mut out: Vec<Vec<usize>> = (0..=n).map(|k| (0..k).collect()).collect();
    for omit in 0..n {
        out.push((0..n).filter(|&i| i != omit).collect());
    }
    for _ in 0..limits.samples {
        out.push((0..n).filter(|_| rng.next_u64() & 1 == 1).collect());
    }
    // Each subset once, in the order first drawn (a sample may repeat a prefix).
    let mut drawn = HashSet::new();
    out.retain(|subset| drawn.insert(subset.clone()));
    out
}
