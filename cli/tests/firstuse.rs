//! First use: every read verb on a store that does not exist (nor its directory) answers as an
//! empty store, exit 0, and creates nothing; `stats` says `"exists": false`. Verbs that need a
//! real store (verify, export) still say there is none, and write nothing either; an import or
//! export given bad input (a missing source, a bad file name), `checkpoint`, `compact` and a
//! write whose --mirror is a file create no store.
//!
//! Does not create a store.

use super::support::tree;
use super::Store;

#[test]
fn reads_of_an_absent_store_answer_as_empty_and_create_nothing() {
    let store = Store::new();
    let db = store.dir.path().join("not/yet/state.redb");
    let db_arg = db.to_str().unwrap().to_owned();
    let hermit = store.dir.path().join("hermit");
    let hermit = hermit.to_str().unwrap();
    let before = tree(store.dir.path());
    let reads: Vec<(Vec<&str>, &str, serde_json::Value)> = vec![
        (vec!["kv", "get", "k"], "found", false.into()),
        (vec!["queue", "list", "q"], "ready", 0.into()),
        (vec!["counter", "get", "c"], "value", 0.into()),
        (vec!["set", "has", "s", "m"], "present", false.into()),
        (vec!["list", "get", "l"], "rows", serde_json::json!([])),
        (vec!["stats"], "exists", false.into()),
        (vec!["feedback", "--project", "p", "list"], "comments", serde_json::json!([])),
        (vec!["proposals", "--dir", hermit, "list"], "micro", serde_json::json!([])),
        (vec!["proposals", "--dir", hermit, "queue"], "pending", serde_json::json!([])),
        (vec!["proposals", "--dir", hermit, "ledger"], "ledger", serde_json::json!([])),
        (vec!["proposals", "--dir", hermit, "index"], "count", 0.into()),
        (vec!["alerts", "--dir", hermit, "list"], "total_ticks", 0.into()),
        (vec!["signals", "pm", "--bundle", "/b"], "pm", serde_json::Value::Null),
        (vec!["signals", "list", "--bundle", "/b"], "sessions", serde_json::json!([])),
        (vec!["--scope", "observer:x", "observer", "state"], "ok", true.into()),
        // A tick over every project without a mirror has no project to pass over.
        (vec!["feedback", "tick"], "projects", serde_json::json!([])),
    ];
    for (args, field, want) in &reads {
        let run = super::run_in(&db, args).expect(0);
        assert_eq!(&run.json()[*field], want, "{args:?}: {run:?}");
    }
    let log = super::run_in(&db, &["log"]).expect(0);
    assert_eq!(log.stdout, "", "an absent store has no events");
    let text = super::run_in(&db, &["--format", "text", "stats"]).expect(0);
    let exists = text.stdout.lines().find(|l| l.starts_with("exists:"));
    assert!(exists.is_some_and(|l| l.ends_with(" false")), "{text:?}");
    let stats = super::run_in(&db, &["stats"]).expect(0).json();
    assert_eq!((stats["events"].as_u64(), stats["file_bytes"].as_u64()), (Some(0), Some(0)));
    assert!(stats["head"]["hash"].is_null(), "an absent store has no hash: {stats}");
    let verify = super::run_in(&db, &["verify"]).expect(6);
    assert!(verify.stderr.contains("no store"), "{verify:?}");
    let out = store.dir.path().join("out");
    let export = ["export", "--layout", "moonshine", "--to", out.to_str().unwrap()];
    super::run_in(&db, &export).expect(6);
    // Bad input to the legacy import and export is refused before the store is opened: an
    // import of a missing directory once created the store it then failed to fill.
    let to = out.to_str().unwrap();
    let bad_name = ["export", "--layout", "observer", "--to", to, "--name", ".."];
    super::run_in(&db, &bad_name).expect(3);
    let missing = store.dir.path().join("missing");
    let import = ["import", "--layout", "observer", "--from", missing.to_str().unwrap()];
    assert!(super::run_in(&db, &import).expect(6).stderr.contains("no directory at"));
    let import = ["import", "--layout", "loopd", "--from", to, "--name", "a/b"];
    super::run_in(&db, &import).expect(3);
    // So are the operator verbs, and a write whose --mirror is not a directory.
    for verb in ["checkpoint", "compact"] {
        assert!(super::run_in(&db, &[verb]).expect(6).stderr.contains("no store at"), "{verb}");
    }
    let file = store.dir.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let mirrored =
        ["--mirror", file.to_str().unwrap(), "--scope", "observer:x", "observer", "turn"];
    assert!(super::run_in(&db, &mirrored).expect(6).stderr.contains("Not a directory"));
    std::fs::remove_file(&file).unwrap();
    assert!(!db.exists() && !db.parent().unwrap().exists(), "a read created {db_arg}");
    assert_eq!(tree(store.dir.path()), before, "a read on an absent store wrote something");
    // The first write creates the store, and the same reads see it.
    super::run_in(&db, &["counter", "add", "c", "2"]).expect(0);
    assert_eq!(super::run_in(&db, &["counter", "get", "c"]).expect(0).json()["value"], 2);
    assert_eq!(super::run_in(&db, &["stats"]).expect(0).json()["exists"], true);
}
