//! Path and permission attacks on the store's directory through the binary (RELIABILITY.md A10,
//! threats 5, 7 and 8): shared or foreign directories refused, modes 0600 and 0700 even under
//! umask 000, a symlinked store path refused without touching its target, a planted anchor
//! symlink never written through, and a hashed sentinel tree outside the root unchanged.
//!
//! Cases for another user run the binary as `nobody` through `setpriv`, which needs root; without
//! root they are counted as skipped in the figures line. Does not test export paths (no export
//! yet) or the legacy replay.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::tree;

/// uid and gid of `nobody` on Debian-like systems.
const NOBODY: u32 = 65_534;
const FILE_MODE: u32 = 0o600;
const DIR_MODE: u32 = 0o700;

/// One call as root (the test's user) or as `nobody`, optionally under `umask 000`.
fn call(db: &Path, args: &[&str], as_nobody: bool, umask_zero: bool) -> (i32, String) {
    let exe = env!("CARGO_BIN_EXE_hookstate");
    let mut script = String::new();
    if umask_zero {
        script.push_str("umask 000; ");
    }
    script.push_str("exec \"$0\" \"$@\"");
    let mut command = if as_nobody {
        let mut c = Command::new("setpriv");
        let id = NOBODY.to_string();
        c.args(["--reuid", &id, "--regid", &id, "--clear-groups", "sh", "-c", &script, exe]);
        c
    } else {
        let mut c = Command::new("sh");
        c.args(["-c", &script, exe]);
        c
    };
    let out = command.arg("--db").arg(db).args(args).env_remove("HOME").output().unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn mkdir(path: &Path, mode: u32) -> PathBuf {
    std::fs::create_dir_all(path).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    path.to_path_buf()
}

fn chown_nobody(path: &Path) {
    let owner = format!("{NOBODY}:{NOBODY}");
    assert!(Command::new("chown").args(["-R", &owner]).arg(path).status().unwrap().success());
}

fn is_root() -> bool {
    let out = Command::new("id").arg("-u").output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim() == "0"
}

/// The tally of one run of every attack.
#[derive(Default)]
struct Tally {
    attacks: u32,
    skipped: u32,
    problems: Vec<String>,
}

impl Tally {
    /// Runs one attack: the call must exit `want` with one stderr line, and `dir` must hold the
    /// same entries afterwards (nothing created, nothing changed).
    fn refused(&mut self, name: &str, db: &Path, args: &[&str], as_nobody: bool, want: i32) {
        self.attacks += 1;
        let dir = db.parent().unwrap();
        let before = tree(dir);
        let (code, stderr) = call(db, args, as_nobody, false);
        if code != want || stderr.lines().count() != 1 {
            self.problems.push(format!("{name}: exit {code} (want {want}): {stderr}"));
        }
        if tree(dir) != before {
            self.problems.push(format!("{name}: the directory changed"));
        }
    }
}

/// Mode checks of a first use under umask 000 in new nested directories.
fn first_use_modes(root: &Path, tally: &mut Tally) {
    tally.attacks += 1;
    let db = root.join("fresh/a/b/state.redb");
    let (code, stderr) = call(&db, &["kv", "put", "k", "1"], false, true);
    if code != 0 {
        tally.problems.push(format!("umask 000 first use: exit {code}: {stderr}"));
        return;
    }
    for (path, want) in [
        (root.join("fresh/a"), DIR_MODE),
        (root.join("fresh/a/b"), DIR_MODE),
        (db.clone(), FILE_MODE),
        (root.join("fresh/a/b/state.redb.head"), FILE_MODE),
    ] {
        let mode = std::fs::metadata(&path).unwrap().mode() & 0o7777;
        if mode != want {
            tally.problems.push(format!("{}: mode {mode:o}, want {want:o}", path.display()));
        }
    }
}

#[test]
fn path_and_permission_attacks_are_refused_and_nothing_escapes() {
    let top = tempfile::tempdir().unwrap();
    let root = mkdir(&top.path().join("root"), 0o755);
    let sentinel = mkdir(&top.path().join("sentinel"), 0o755);
    std::fs::write(sentinel.join("victim"), b"").unwrap();
    std::fs::write(sentinel.join("bashrc"), b"echo hi\n").unwrap();
    let sentinel_before = tree(&sentinel);
    let mut tally = Tally::default();

    first_use_modes(&root, &mut tally);
    for (name, mode) in [("world_writable", 0o777), ("group_writable", 0o770), ("sticky", 0o1777)] {
        let dir = mkdir(&root.join(name), mode);
        tally.refused(name, &dir.join("state.redb"), &["kv", "put", "k", "1"], false, 6);
    }
    let link = mkdir(&root.join("links"), DIR_MODE);
    std::os::unix::fs::symlink(sentinel.join("victim"), link.join("empty.redb")).unwrap();
    tally.refused("symlink_to_empty_victim", &link.join("empty.redb"), &["init"], false, 6);
    std::os::unix::fs::symlink(sentinel.join("bashrc"), link.join("file.redb")).unwrap();
    tally.refused("symlink_to_file_get", &link.join("file.redb"), &["kv", "get", "k"], false, 6);
    tally.refused(
        "symlink_to_file_put",
        &link.join("file.redb"),
        &["kv", "put", "k", "1"],
        false,
        6,
    );

    // A planted anchor symlink is never read or written through: it is an anchor that cannot be
    // read, so the write is refused (exit 5, one line) and the link stays as evidence.
    tally.attacks += 1;
    let planted = mkdir(&root.join("planted"), DIR_MODE);
    std::os::unix::fs::symlink(sentinel.join("bashrc"), planted.join("state.redb.head")).unwrap();
    let (code, stderr) = call(&planted.join("state.redb"), &["kv", "put", "k", "1"], false, false);
    let anchor = std::fs::symlink_metadata(planted.join("state.redb.head")).unwrap();
    if code != 5 || stderr.lines().count() != 1 || !anchor.file_type().is_symlink() {
        tally.problems.push(format!("planted anchor symlink: exit {code}: {stderr}"));
    }

    if is_root() {
        let foreign = mkdir(&root.join("foreign"), DIR_MODE);
        chown_nobody(&foreign);
        tally.refused("owned_by_other_uid", &foreign.join("s.redb"), &["init"], false, 6);
        let theirs = mkdir(&root.join("theirs"), 0o755);
        tally.refused(
            "nobody_in_root_dir",
            &theirs.join("s.redb"),
            &["kv", "put", "k", "1"],
            true,
            6,
        );
        let private = mkdir(&root.join("private"), DIR_MODE);
        tally.refused("nobody_in_private_dir", &private.join("s.redb"), &["init"], true, 6);
        let own = mkdir(&root.join("own"), DIR_MODE);
        let db = own.join("s.redb");
        assert_eq!(call(&db, &["kv", "put", "k", "1"], false, false).0, 0);
        chown_nobody(&own);
        std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o400)).unwrap();
        tally.refused("read_only_store_put", &db, &["kv", "put", "k", "2"], true, 6);
        // A read verb opens the store file read-only, so a caller who may only read it gets the
        // answer, and the directory stays unchanged.
        tally.attacks += 1;
        let before = tree(&own);
        let (code, stderr) = call(&db, &["kv", "get", "k"], true, false);
        if code != 0 || !stderr.is_empty() {
            tally.problems.push(format!("read_only_store_get: exit {code} (want 0): {stderr}"));
        }
        if tree(&own) != before {
            tally.problems.push("read_only_store_get: the directory changed".into());
        }
    } else {
        tally.skipped += 5;
    }

    let escapes = u32::from(tree(&sentinel) != sentinel_before);
    println!(
        "perms attacks={} skipped={} escapes={escapes} problems={}",
        tally.attacks,
        tally.skipped,
        tally.problems.len()
    );
    assert_eq!(escapes, 0, "the sentinel tree outside the root changed");
    assert!(tally.problems.is_empty(), "{:#?}", tally.problems);
}

/// Hostile legacy file names (RELIABILITY.md A10, threat 5): `export` and `import` of the loopd
/// and observer layouts with a `--name` that climbs out of, or replaces, the root. Each is refused
/// with exit 3 and one stderr line; a hashed sentinel tree beside the root stays unchanged and
/// nothing appears outside the root. The `naive-path-join` drill must fail here.
#[test]
fn hostile_legacy_file_names_never_escape_the_root() {
    let top = tempfile::tempdir().unwrap();
    let store = mkdir(&top.path().join("store"), DIR_MODE);
    let db = store.join("state.redb");
    assert_eq!(call(&db, &["init"], false, false).0, 0);
    let root = mkdir(&top.path().join("root"), DIR_MODE);
    let sentinel = mkdir(&top.path().join("sentinel"), DIR_MODE);
    std::fs::write(sentinel.join("victim"), b"keep").unwrap();
    let sentinel_before = tree(&sentinel);
    let victim = sentinel.join("victim");
    let names = [
        "../escape".to_owned(),
        "../sentinel/victim".to_owned(),
        "a/../../escape".to_owned(),
        "..".to_owned(),
        ".".to_owned(),
        String::new(),
        victim.to_string_lossy().into_owned(),
        top.path().join("escape").to_string_lossy().into_owned(),
    ];
    let (mut attacks, mut problems) = (0, Vec::new());
    for layout in ["loopd", "observer"] {
        for verb in ["export", "import"] {
            for name in &names {
                attacks += 1;
                let dir_flag = if verb == "export" { "--to" } else { "--from" };
                let root_arg = root.to_str().unwrap();
                let args = [verb, "--layout", layout, dir_flag, root_arg, "--name", name];
                let (code, stderr) = call(&db, &args, false, false);
                if code != 3 || stderr.lines().count() != 1 {
                    problems.push(format!("{verb} {layout} {name:?}: exit {code}: {stderr}"));
                }
            }
        }
    }
    let outside: Vec<_> = std::fs::read_dir(top.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !["store", "root", "sentinel"].contains(&n.as_str()))
        .collect();
    let escapes = usize::from(tree(&sentinel) != sentinel_before) + outside.len();
    println!("traversal attacks={attacks} escapes={escapes} problems={}", problems.len());
    assert_eq!(escapes, 0, "written outside the root: {outside:?}");
    assert!(problems.is_empty(), "{problems:#?}");
}
