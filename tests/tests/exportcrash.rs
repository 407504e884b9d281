//! The export crash simulator (RELIABILITY.md A4b): the legacy writer's steps
//! ([`durable::replace_file`] and [`durable::make_subdir`], the very code `Root::write` and
//! `Root::subdir` run) drive a model file system that keeps, on a power cut, only what was
//! synced: file data after the file's fsync, directory entries (creates, renames, removes,
//! mkdirs) after the directory's fsync. A seeded export of [`EXPORT_FILES`] files into a root
//! that already holds an older export (some files replaced, some new, two new subdirectories)
//! is cut after every operation, and each cut yields [`IMAGES_PER_CRASH`] images: variant 0
//! drops everything unsynced, variant 1 keeps every unsynced directory entry but no unsynced
//! data (the "renamed before its data reached the disk" case), variant 2 keeps everything, the
//! others keep a random subset of each directory's unsynced entry operations (in order) and
//! keep, drop or tear (at 512-byte sectors) each file's unsynced data.
//!
//! Every image must hold, for every target, its old bytes or its new bytes, whole (never torn,
//! empty or missing when it existed); the new bytes for every write that had returned before the
//! cut; no name but targets, planned directories and the writer's temp files (counted); and
//! the root's parent must hold only the root and an untouched sentinel. Does not touch the real
//! file system.

use std::collections::BTreeMap;

use hookstate_engine::durable::{self, DirOps};
use hookstate_engine::{Error, Result};

use crate::powerloss::Rng;

/// Files one simulated export writes.
const EXPORT_FILES: usize = 200;
/// Images per crash point (variants 0–2 are fixed, the rest random).
const IMAGES_PER_CRASH: u64 = 16;
/// The unit a torn write is cut at.
const SECTOR_BYTES: usize = 512;
/// Largest file in the export.
const FILE_BYTES_MAX: u64 = 3 * SECTOR_BYTES as u64;
/// The seed when `HOOKSTATE_EXPORTCRASH_SEED` is unset.
const SEED_DEFAULT: u64 = 0x6578_706f_7274_6372;
/// The prefix of the temp files the simulated writer uses (the real one adds random hex).
const TEMP_PREFIX: &str = ".hookstate-tmp-";
/// The sentinel beside the root, and its bytes.
const SENTINEL: (&str, &[u8]) = ("sentinel", b"outside the export root");
/// The root's name in its parent.
const ROOT: &str = "export";
/// Subdirectories of the root: the first exists before the export, the others are created by it.
const SUBDIRS: [&str; 3] = ["state", ".feedback", "proposals"];

/// A directory entry: a file inode or a directory inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Node {
    File(usize),
    Dir(usize),
}

/// An entry operation on a directory that is not durable until the directory is synced.
#[derive(Debug, Clone)]
enum EntryOp {
    Link(String, Node),
    Rename(String, String, Node),
    Unlink(String),
}

#[derive(Debug, Default, Clone)]
struct FileInode {
    /// What reads see.
    data: Vec<u8>,
    /// What a power cut keeps.
    durable: Vec<u8>,
}

#[derive(Debug, Default, Clone)]
struct DirInode {
    entries: BTreeMap<String, Node>,
    durable: BTreeMap<String, Node>,
    pending: Vec<EntryOp>,
}

fn apply(entries: &mut BTreeMap<String, Node>, op: &EntryOp) {
    match op {
        EntryOp::Link(name, node) => {
            entries.insert(name.clone(), *node);
        }
        EntryOp::Rename(from, to, node) => {
            entries.remove(from);
            entries.insert(to.clone(), *node);
        }
        EntryOp::Unlink(name) => {
            entries.remove(name);
        }
    }
}

/// The model file system; directory 0 is the root's parent.
#[derive(Debug, Default)]
struct Fs {
    files: Vec<FileInode>,
    dirs: Vec<DirInode>,
}

/// What a crash image holds: each directory's entries, each file's bytes.
struct Image {
    dirs: Vec<BTreeMap<String, Node>>,
    files: Vec<Vec<u8>>,
}

impl Fs {
    fn new() -> Fs {
        Fs { files: Vec::new(), dirs: vec![DirInode::default()] }
    }

    fn new_file(&mut self) -> usize {
        self.files.push(FileInode::default());
        self.files.len() - 1
    }

    fn new_dir(&mut self) -> usize {
        self.dirs.push(DirInode::default());
        self.dirs.len() - 1
    }

    fn entry_op(&mut self, dir: usize, op: EntryOp) {
        apply(&mut self.dirs[dir].entries, &op);
        self.dirs[dir].pending.push(op);
    }

    fn sync_dir(&mut self, dir: usize) {
        let d = &mut self.dirs[dir];
        d.durable = d.entries.clone();
        d.pending.clear();
    }

    fn sync_file(&mut self, file: usize) {
        let f = &mut self.files[file];
        f.durable = f.data.clone();
    }

    /// Everything synced: the state before the export starts.
    fn sync_all(&mut self) {
        for dir in 0..self.dirs.len() {
            self.sync_dir(dir);
        }
        for file in 0..self.files.len() {
            self.sync_file(file);
        }
    }

    /// The image a power cut leaves, as variant `variant` (see the module doc).
    fn image(&self, variant: u64, rng: &mut Rng) -> Image {
        let dirs = self
            .dirs
            .iter()
            .map(|d| {
                let mut entries = d.durable.clone();
                for op in &d.pending {
                    let keep = match variant {
                        0 => false,
                        1 | 2 => true,
                        _ => rng.coin(),
                    };
                    if keep {
                        apply(&mut entries, op);
                    }
                }
                entries
            })
            .collect();
        let files = self
            .files
            .iter()
            .map(|f| {
                if f.data == f.durable {
                    return f.durable.clone();
                }
                match variant {
                    0 | 1 => f.durable.clone(),
                    2 => f.data.clone(),
                    _ => match rng.below(3) {
                        0 => f.durable.clone(),
                        1 => f.data.clone(),
                        _ => {
                            let sectors = f.data.len().div_ceil(SECTOR_BYTES) as u64;
                            let keep = usize::try_from(rng.below(sectors.max(1))).unwrap();
                            f.data[..(keep * SECTOR_BYTES).min(f.data.len())].to_vec()
                        }
                    },
                }
            })
            .collect();
        Image { dirs, files }
    }
}

/// Where a planned file goes: a directory of the old export, or a subdirectory the export
/// creates.
#[derive(Debug, Clone, Copy)]
enum Where {
    Dir(usize),
    New(&'static str),
}

/// One planned write of the export.
struct Planned {
    dir: Where,
    name: String,
    old: Option<Vec<u8>>,
    new: Vec<u8>,
}

/// The figures of a run.
#[derive(Debug, Default)]
struct Figures {
    crash_points: u64,
    images: u64,
    torn_exports: u64,
    lost_writes: u64,
    stray_entries: u64,
    outside_changes: u64,
    leftover_temps: u64,
    first_violation: Option<String>,
}

impl Figures {
    fn violation(&mut self, what: String) {
        if self.first_violation.is_none() {
            self.first_violation = Some(what);
        }
    }
}

/// The simulator: the model, the export's plan and which writes returned.
struct Sim {
    fs: Fs,
    rng: Rng,
    root: usize,
    /// Subdirectory name -> its inode once created.
    subdirs: BTreeMap<&'static str, usize>,
    plan: Vec<Planned>,
    returned: Vec<bool>,
    figures: Figures,
}

impl Sim {
    /// The root with the old export: `state/` and half of the planned files in place, synced.
    fn new(seed: u64) -> Sim {
        let mut fs = Fs::new();
        let mut rng = Rng(seed);
        let sentinel = fs.new_file();
        fs.files[sentinel].data = SENTINEL.1.to_vec();
        fs.entry_op(0, EntryOp::Link(SENTINEL.0.into(), Node::File(sentinel)));
        let root = fs.new_dir();
        fs.entry_op(0, EntryOp::Link(ROOT.into(), Node::Dir(root)));
        let state = fs.new_dir();
        fs.entry_op(root, EntryOp::Link(SUBDIRS[0].into(), Node::Dir(state)));
        let mut subdirs = BTreeMap::new();
        subdirs.insert(SUBDIRS[0], state);
        let mut plan = Vec::new();
        for i in 0..EXPORT_FILES {
            let sub = usize::try_from(rng.below(SUBDIRS.len() as u64 + 1)).unwrap();
            let name = format!("file-{i:03}.json");
            let len = usize::try_from(1 + rng.below(FILE_BYTES_MAX)).unwrap();
            let fill = |rng: &mut Rng| {
                (0..len)
                    .map(|_| b"abcdefghijklmnopqrstuvwxyz"[usize::try_from(rng.below(26)).unwrap()])
                    .collect()
            };
            let new: Vec<u8> = fill(&mut rng);
            // Files of the root itself (sub 0) and of `state/` may have an old version.
            let dir = match sub {
                0 => Where::Dir(root),
                1 => Where::Dir(state),
                _ => Where::New(SUBDIRS[sub - 1]),
            };
            let old = match dir {
                Where::Dir(dir) if rng.coin() => {
                    let old: Vec<u8> = fill(&mut rng);
                    let inode = fs.new_file();
                    fs.files[inode].data = old.clone();
                    fs.entry_op(dir, EntryOp::Link(name.clone(), Node::File(inode)));
                    Some(old)
                }
                _ => None,
            };
            plan.push(Planned { dir, name, old, new });
        }
        fs.sync_all();
        let returned = vec![false; plan.len()];
        Sim { fs, rng, root, subdirs, plan, returned, figures: Figures::default() }
    }

    /// A power cut now: checks every image variant.
    fn crash_here(&mut self) {
        let mut figures = std::mem::take(&mut self.figures);
        figures.crash_points += 1;
        for variant in 0..IMAGES_PER_CRASH {
            let image = self.fs.image(variant, &mut self.rng);
            figures.images += 1;
            self.check(&image, variant, &mut figures);
        }
        self.figures = figures;
    }

    fn check(&self, image: &Image, variant: u64, figures: &mut Figures) {
        let cut = figures.crash_points;
        // Outside the root: only the root and the untouched sentinel.
        let parent = &image.dirs[0];
        let sentinel_ok = matches!(parent.get(SENTINEL.0),
            Some(Node::File(f)) if image.files[*f] == SENTINEL.1);
        if parent.len() != 2 || !sentinel_ok || parent.get(ROOT) != Some(&Node::Dir(self.root)) {
            figures.outside_changes += 1;
            figures.violation(format!("cut {cut} variant {variant}: outside the root: {parent:?}"));
        }
        // Each directory of the image as reached from the root (a subdirectory whose entry was
        // lost is absent, with everything in it).
        let mut reached: BTreeMap<usize, &BTreeMap<String, Node>> = BTreeMap::new();
        reached.insert(self.root, &image.dirs[self.root]);
        for (name, node) in &image.dirs[self.root] {
            if let (Node::Dir(d), true) = (node, SUBDIRS.contains(&name.as_str())) {
                reached.insert(*d, &image.dirs[*d]);
            }
        }
        let mut expected: BTreeMap<(usize, &str), usize> = BTreeMap::new();
        for (i, p) in self.plan.iter().enumerate() {
            let dir = self.resolve(p.dir);
            if let Some(dir) = dir {
                expected.insert((dir, p.name.as_str()), i);
            }
            let content = dir
                .and_then(|d| reached.get(&d))
                .and_then(|entries| entries.get(&p.name))
                .map(|node| match node {
                    Node::File(f) => Some(&image.files[*f]),
                    Node::Dir(_) => None,
                });
            let ok = match content {
                Some(Some(bytes)) if *bytes == p.new => true,
                Some(Some(bytes)) => !self.returned[i] && p.old.as_ref() == Some(bytes),
                Some(None) => false,
                None => !self.returned[i] && p.old.is_none(),
            };
            if !ok {
                let lost =
                    self.returned[i] && content.flatten().is_none_or(|b| p.old.as_ref() == Some(b));
                if lost {
                    figures.lost_writes += 1;
                } else {
                    figures.torn_exports += 1;
                }
                let len = content.flatten().map(Vec::len);
                figures.violation(format!(
                    "cut {cut} variant {variant}: {} returned={} holds {len:?} bytes \
                     (old {:?}, new {})",
                    p.name,
                    self.returned[i],
                    p.old.as_ref().map(Vec::len),
                    p.new.len()
                ));
            }
        }
        // No names but targets, planned subdirectories and temp files.
        for (dir, entries) in &reached {
            for (name, node) in *entries {
                let planned_dir = *dir == self.root && SUBDIRS.contains(&name.as_str());
                if name.starts_with(TEMP_PREFIX) {
                    figures.leftover_temps += 1;
                } else if !planned_dir && !expected.contains_key(&(*dir, name.as_str())) {
                    figures.stray_entries += 1;
                    figures
                        .violation(format!("cut {cut} variant {variant}: stray {name} {node:?}"));
                }
            }
        }
    }

    /// The inode of a planned file's directory, `None` for a subdirectory not yet created.
    fn resolve(&self, dir: Where) -> Option<usize> {
        match dir {
            Where::Dir(dir) => Some(dir),
            Where::New(sub) => self.subdirs.get(sub).copied(),
        }
    }

    /// Runs the export through the writer's steps, cutting the power after every operation.
    fn run(&mut self) -> Figures {
        self.crash_here();
        for i in 0..self.plan.len() {
            let dir = match (self.resolve(self.plan[i].dir), self.plan[i].dir) {
                (Some(dir), _) => dir,
                (None, Where::Dir(_)) => unreachable!("an old directory always resolves"),
                (None, Where::New(sub)) => {
                    let root = self.root;
                    durable::make_subdir(&mut ModelDir { sim: self, dir: root }, sub).unwrap();
                    self.subdirs[sub]
                }
            };
            let temp = format!("{TEMP_PREFIX}{i:016x}");
            let (name, bytes) = (self.plan[i].name.clone(), self.plan[i].new.clone());
            durable::replace_file(&mut ModelDir { sim: self, dir }, &temp, &name, &bytes).unwrap();
            self.returned[i] = true;
        }
        self.crash_here();
        std::mem::take(&mut self.figures)
    }
}

/// The writer's view of one model directory; every operation is followed by a power cut.
struct ModelDir<'a> {
    sim: &'a mut Sim,
    dir: usize,
}

impl ModelDir<'_> {
    fn done<T>(&mut self, value: T) -> Result<T> {
        self.sim.crash_here();
        Ok(value)
    }
}

impl DirOps for ModelDir<'_> {
    type File = usize;

    fn create_new(&mut self, name: &str) -> Result<usize> {
        if self.sim.fs.dirs[self.dir].entries.contains_key(name) {
            return Err(Error::Invalid(format!("{name} exists")));
        }
        let file = self.sim.fs.new_file();
        self.sim.fs.entry_op(self.dir, EntryOp::Link(name.into(), Node::File(file)));
        self.done(file)
    }

    fn write_all(&mut self, file: &mut usize, bytes: &[u8]) -> Result<()> {
        self.sim.fs.files[*file].data.extend_from_slice(bytes);
        self.done(())
    }

    fn sync_file(&mut self, file: &mut usize) -> Result<()> {
        self.sim.fs.sync_file(*file);
        self.done(())
    }

    fn rename(&mut self, from: &str, to: &str) -> Result<()> {
        let node = *self.sim.fs.dirs[self.dir]
            .entries
            .get(from)
            .ok_or_else(|| Error::Invalid(format!("{from} is absent")))?;
        self.sim.fs.entry_op(self.dir, EntryOp::Rename(from.into(), to.into(), node));
        self.done(())
    }

    fn remove(&mut self, name: &str) -> Result<()> {
        self.sim.fs.entry_op(self.dir, EntryOp::Unlink(name.into()));
        self.done(())
    }

    fn sync_dir(&mut self) -> Result<()> {
        self.sim.fs.sync_dir(self.dir);
        self.done(())
    }

    fn make_dir(&mut self, name: &str) -> Result<bool> {
        if self.sim.fs.dirs[self.dir].entries.contains_key(name) {
            return self.done(false);
        }
        let dir = self.sim.fs.new_dir();
        self.sim.fs.entry_op(self.dir, EntryOp::Link(name.into(), Node::Dir(dir)));
        if let Some(sub) = SUBDIRS.iter().find(|s| **s == name) {
            self.sim.subdirs.insert(sub, dir);
        }
        self.done(true)
    }
}

#[test]
fn export_crash_at_every_step_leaves_old_or_new_files_and_keeps_returned_writes() {
    let seed = std::env::var("HOOKSTATE_EXPORTCRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(SEED_DEFAULT);
    let f = Sim::new(seed).run();
    println!(
        "exportcrash files={EXPORT_FILES} crash_points={} images={} torn_exports={} \
         lost_writes={} stray_entries={} outside_changes={} leftover_temps={} seed={seed}",
        f.crash_points,
        f.images,
        f.torn_exports,
        f.lost_writes,
        f.stray_entries,
        f.outside_changes,
        f.leftover_temps,
    );
    assert!(f.crash_points > 5 * EXPORT_FILES as u64, "the export ran fewer steps than planned");
    assert_eq!(
        (f.torn_exports, f.lost_writes, f.stray_entries, f.outside_changes),
        (0, 0, 0, 0),
        "first violation: {:?}",
        f.first_violation
    );
}
