//! The remote cache against a real S3 server (SeaweedFS, started by
//! `scripts/s3-server.sh start`; `.ci/run` starts it) and against a
//! `file://` directory. Each test works under its own prefix.
//!
//! Without the server, the S3 tests skip with a message (in CI they fail).

use crate::common;

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{LADDER, S3_PORT, encoded, files_in, s3_env, tiny_model, unique_url};

/// A machine: its own directory with the ladder recipe and the model, and
/// its own cache.
struct Machine {
    dir: tempfile::TempDir,
}

impl Machine {
    fn new() -> Machine {
        let dir = tempfile::tempdir().unwrap();
        std::fs::copy(tiny_model(), dir.path().join("tiny.gguf")).unwrap();
        std::fs::write(dir.path().join("ladder.toml"), LADDER).unwrap();
        Machine { dir }
    }

    fn recipe(&self) -> PathBuf {
        self.dir.path().join("ladder.toml")
    }

    fn cache(&self) -> PathBuf {
        self.dir.path().join("cache")
    }

    fn command(&self, env: &[(String, String)], url: &str, args: &[&OsStr]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_quantforge"));
        command.args(args).arg("--cache-dir").arg(self.cache()).arg("--cache-url").arg(url);
        command.envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        command
    }

    fn run(&self, env: &[(String, String)], url: &str, extra: &[&str]) -> Output {
        let recipe = self.recipe();
        let mut args: Vec<&OsStr> = vec!["run".as_ref(), recipe.as_os_str()];
        args.extend(["--json"].iter().chain(extra).map(OsStr::new));
        self.command(env, url, &args).output().unwrap()
    }

    fn outputs(&self) -> Vec<(String, Vec<u8>)> {
        files_in(&self.dir.path().join("out"))
    }
}

fn report(out: &Output) -> serde_json::Value {
    assert!(out.status.success(), "run failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn verify_remote(env: &[(String, String)], url: &str) {
    let machine = Machine::new();
    let out = machine.command(env, url, &["cache".as_ref(), "verify".as_ref(), "--remote".as_ref()]).output().unwrap();
    assert!(
        out.status.success(),
        "verify --remote: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Two machines, one bucket: the second encodes nothing and writes the same bytes.
fn second_machine_encodes_nothing(env: &[(String, String)], url: &str) {
    let (a, b) = (Machine::new(), Machine::new());
    let first = report(&a.run(env, url, &[]));
    assert!(encoded(&first) > 0);
    let second = report(&b.run(env, url, &[]));
    assert_eq!(encoded(&second), 0, "{second:#}");
    assert!(second["remote"]["blobs_fetched"].as_u64().unwrap() > 0);
    assert_eq!(a.outputs(), b.outputs());
    verify_remote(env, url);
}

#[test]
fn two_machines_share_one_s3_bucket() {
    let Some(env) = s3_env() else { return };
    second_machine_encodes_nothing(&env, &unique_url(&env, "two-machines"));
}

#[test]
fn two_machines_share_one_directory() {
    let shared = tempfile::tempdir().unwrap();
    let url = format!("file://{}", shared.path().display());
    second_machine_encodes_nothing(&[], &url);
}

/// Every blob file under a `file://` remote.
fn remote_blob_files(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let blobs = root.join("quantforge-v1/blobs");
    for shard in std::fs::read_dir(blobs).unwrap() {
        for file in std::fs::read_dir(shard.unwrap().path()).unwrap() {
            out.push(file.unwrap().path());
        }
    }
    out.sort();
    out
}

#[test]
fn a_remote_blob_with_other_bytes_is_not_used_and_is_repaired() {
    let Some(env) = s3_env() else { return };
    let url = unique_url(&env, "corrupt-blob");
    let (a, b) = (Machine::new(), Machine::new());
    report(&a.run(&env, &url, &[]));
    // Overwrite every blob of the remote through the S3 API with other bytes
    // of the same length.
    let remote = s3_client(&env, &url);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        use futures::TryStreamExt;
        use object_store::{ObjectStore, ObjectStoreExt};
        let prefix = remote.1.clone().join("quantforge-v1").join("blobs");
        let blobs: Vec<_> = remote.0.list(Some(&prefix)).try_collect().await.unwrap();
        assert!(!blobs.is_empty());
        for blob in blobs {
            let mut bytes = remote.0.get(&blob.location).await.unwrap().bytes().await.unwrap().to_vec();
            bytes[0] ^= 0xff;
            remote.0.put(&blob.location, bytes.into()).await.unwrap();
        }
    });
    let second = report(&b.run(&env, &url, &[]));
    let incidents = second["cache_incidents"].as_array().expect("the corruption is reported");
    assert!(incidents.iter().any(|i| i["what"].as_str().unwrap().starts_with("remote blob")), "{second:#}");
    assert_eq!(a.outputs(), b.outputs());
    // What b recomputed was uploaded over the bad blobs.
    verify_remote(&env, &url);
}

fn s3_client(env: &[(String, String)], url: &str) -> (Arc<dyn object_store::ObjectStore>, object_store::path::Path) {
    let var = |name: &str| env.iter().find(|(k, _)| k == name).unwrap().1.clone();
    let (bucket, prefix) = url.strip_prefix("s3://").unwrap().split_once('/').unwrap();
    let store = object_store::aws::AmazonS3Builder::new()
        .with_bucket_name(bucket)
        .with_endpoint(var("AWS_ENDPOINT_URL"))
        .with_allow_http(true)
        .with_region(var("AWS_REGION"))
        .with_access_key_id(var("AWS_ACCESS_KEY_ID"))
        .with_secret_access_key(var("AWS_SECRET_ACCESS_KEY"))
        .build()
        .unwrap();
    (Arc::new(store), object_store::path::Path::from(prefix))
}

#[test]
fn a_file_remote_blob_with_other_bytes_is_not_used() {
    let shared = tempfile::tempdir().unwrap();
    let url = format!("file://{}", shared.path().display());
    let (a, b) = (Machine::new(), Machine::new());
    report(&a.run(&[], &url, &[]));
    for path in remote_blob_files(shared.path()) {
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[0] ^= 0xff;
        std::fs::write(&path, bytes).unwrap();
    }
    let second = report(&b.run(&[], &url, &[]));
    assert!(encoded(&second) > 0, "bad blobs must be recomputed");
    assert_eq!(a.outputs(), b.outputs());
    verify_remote(&[], &url);
}

#[test]
fn sixteen_concurrent_machines_write_the_same_keys() {
    let Some(env) = s3_env() else { return };
    let url = unique_url(&env, "concurrent");
    let machines: Vec<Machine> = (0..16).map(|_| Machine::new()).collect();
    let children: Vec<_> = machines
        .iter()
        .map(|m| {
            let recipe = m.recipe();
            m.command(&env, &url, &["run".as_ref(), recipe.as_os_str(), "--jobs".as_ref(), "1".as_ref()])
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let first = machines[0].outputs();
    assert!(machines.iter().all(|m| m.outputs() == first));
    verify_remote(&env, &url);
}

#[test]
fn runs_killed_during_uploads_leave_no_entry_naming_a_missing_blob() {
    let Some(env) = s3_env() else { return };
    let url = unique_url(&env, "killed");
    for round in 0..10u64 {
        let machine = Machine::new();
        let recipe = machine.recipe();
        let mut child = machine
            .command(&env, &url, &["run".as_ref(), recipe.as_os_str()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Spread over the run: from the first uploads to its end.
        std::thread::sleep(Duration::from_millis(100 + (round * 7919) % 900));
        let _ = child.kill();
        child.wait().unwrap();
        verify_remote(&env, &url);
    }
    let (reference, machine) = (Machine::new(), Machine::new());
    report(&reference.run(&[], &format!("file://{}", reference.dir.path().join("alone").display()), &[]));
    report(&machine.run(&env, &url, &[]));
    assert_eq!(reference.outputs(), machine.outputs());
}

/// Forwards connections to the S3 server until stopped; then refuses them
/// and cuts the open ones — the server going away, as a client sees it.
struct Proxy {
    port: u16,
}

impl Proxy {
    /// A proxy that goes away once it has forwarded `cut_after` bytes: mid
    /// run however fast the run is, where a timer may fire after it ended.
    fn start(cut_after: u64) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let flag = Arc::new(AtomicBool::new(false));
        let forwarded = Arc::new(std::sync::atomic::AtomicU64::new(0));
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                if flag.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(server) = TcpStream::connect(("127.0.0.1", S3_PORT)) else { continue };
                for (mut from, mut to) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server.try_clone().unwrap(), client.try_clone().unwrap()),
                ] {
                    let (flag, forwarded) = (flag.clone(), forwarded.clone());
                    std::thread::spawn(move || {
                        let mut buf = [0u8; 65536];
                        while let Ok(n) = from.read(&mut buf) {
                            if n == 0 || flag.load(Ordering::SeqCst) || to.write_all(&buf[..n]).is_err() {
                                break;
                            }
                            if forwarded.fetch_add(n as u64, Ordering::SeqCst) + n as u64 >= cut_after {
                                flag.store(true, Ordering::SeqCst);
                            }
                        }
                        let _ = to.shutdown(std::net::Shutdown::Both);
                        let _ = from.shutdown(std::net::Shutdown::Both);
                    });
                }
            }
        });
        Proxy { port }
    }
}

#[test]
fn a_server_that_goes_away_mid_run_leaves_a_local_run_and_a_warning() {
    let Some(mut env) = s3_env() else { return };
    // The run uploads about 3 MiB: the proxy goes away a sixth of the way.
    let proxy = Proxy::start(512 << 10);
    for (k, v) in &mut env {
        if k == "AWS_ENDPOINT_URL" {
            *v = format!("http://127.0.0.1:{}", proxy.port);
        }
    }
    let url = unique_url(&env, "goes-away");
    let (reference, machine) = (Machine::new(), Machine::new());
    report(&reference.run(&[], &format!("file://{}", reference.dir.path().join("alone").display()), &[]));
    let recipe = machine.recipe();
    let child = machine
        .command(&env, &url, &["run".as_ref(), recipe.as_os_str()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("warning: remote cache"), "{stderr}");
    assert_eq!(reference.outputs(), machine.outputs());
}

#[test]
fn an_unreachable_remote_is_a_warning_or_with_remote_required_an_error() {
    // A port nothing listens on.
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let env = vec![
        ("AWS_ENDPOINT_URL".to_owned(), format!("http://127.0.0.1:{port}")),
        ("AWS_ALLOW_HTTP".to_owned(), "true".to_owned()),
        ("AWS_REGION".to_owned(), "us-east-1".to_owned()),
        ("AWS_ACCESS_KEY_ID".to_owned(), "id".to_owned()),
        ("AWS_SECRET_ACCESS_KEY".to_owned(), "top-secret-value".to_owned()),
    ];
    let machine = Machine::new();
    let out = machine.run(&env, "s3://bucket/prefix", &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("warning: remote cache s3://bucket/prefix"), "{stderr}");
    assert!(!stderr.contains("top-secret-value"));
    assert!(encoded(&report(&out)) > 0);

    let out = machine.run(&env, "s3://bucket/prefix", &["--remote-required"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("does not answer"), "{stderr}");
    assert!(!stderr.contains("top-secret-value"));
}

#[test]
fn a_url_with_credentials_is_refused_without_repeating_them() {
    let machine = Machine::new();
    let out = machine.run(&[], "s3://AKIDEXAMPLE:hunter2@bucket/prefix", &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("AWS_SECRET_ACCESS_KEY"), "{stderr}");
    assert!(!stderr.contains("hunter2") && !stderr.contains("AKIDEXAMPLE"), "{stderr}");
}

#[test]
fn push_then_pull_moves_a_recipe_between_caches() {
    let shared = tempfile::tempdir().unwrap();
    let url = format!("file://{}", shared.path().display());
    let a = Machine::new();
    // Built without the remote, then pushed.
    let built =
        common::quantforge(&["run".as_ref(), a.recipe().as_os_str(), "--cache-dir".as_ref(), a.cache().as_os_str()]);
    assert!(built.status.success());
    let push = a.command(&[], &url, &["cache".as_ref(), "push".as_ref(), a.recipe().as_os_str()]).output().unwrap();
    assert!(push.status.success(), "{}", String::from_utf8_lossy(&push.stderr));
    let b = Machine::new();
    let pull = b.command(&[], &url, &["cache".as_ref(), "pull".as_ref(), b.recipe().as_os_str()]).output().unwrap();
    assert!(pull.status.success(), "{}", String::from_utf8_lossy(&pull.stderr));
    // Offline now: the local cache alone assembles the outputs.
    let offline = common::quantforge(&[
        "run".as_ref(),
        b.recipe().as_os_str(),
        "--json".as_ref(),
        "--cache-dir".as_ref(),
        b.cache().as_os_str(),
    ]);
    assert_eq!(encoded(&report(&offline)), 0);
    assert_eq!(a.outputs(), b.outputs());
}

fn cache_command(machine: &Machine, url: &str, args: &[&str]) -> Output {
    let args: Vec<&OsStr> = ["cache"].iter().chain(args).map(OsStr::new).collect();
    machine.command(&[], url, &args).output().unwrap()
}

fn stdout_of(out: &Output) -> String {
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn ls_du_verify_repair_and_gc_on_a_remote() {
    let shared = tempfile::tempdir().unwrap();
    let url = format!("file://{}", shared.path().display());
    let machine = Machine::new();
    report(&machine.run(&[], &url, &[]));
    let blobs = remote_blob_files(shared.path());

    let ls = stdout_of(&cache_command(&machine, &url, &["ls", "--remote"]));
    assert_eq!(ls.lines().filter(|l| l.contains("exports")).count(), 3, "{ls}");
    let du = stdout_of(&cache_command(&machine, &url, &["du", "--remote"]));
    assert!(du.contains(&format!("in {} blobs", blobs.len())), "{du}");

    // One corrupt blob: verify fails and names it, --repair deletes it and
    // every entry naming it, after which verify is clean and a run puts
    // back what was lost.
    let mut bytes = std::fs::read(&blobs[0]).unwrap();
    bytes[0] ^= 0xff;
    std::fs::write(&blobs[0], bytes).unwrap();
    let verify = cache_command(&machine, &url, &["verify", "--remote"]);
    assert!(!verify.status.success());
    let name = blobs[0].file_name().unwrap().to_str().unwrap();
    assert!(String::from_utf8_lossy(&verify.stdout).contains(&format!("corrupt blob {name}")));
    stdout_of(&cache_command(&machine, &url, &["verify", "--remote", "--repair"]));
    assert!(!blobs[0].exists());
    stdout_of(&cache_command(&machine, &url, &["verify", "--remote"]));
    let other = Machine::new();
    report(&other.run(&[], &url, &[]));
    assert_eq!(machine.outputs(), other.outputs());
    stdout_of(&cache_command(&machine, &url, &["verify", "--remote"]));

    // gc keeps what is younger than the age, removes what is older.
    let kept = stdout_of(&cache_command(&machine, &url, &["gc", "--remote", "--older-than", "1d"]));
    assert!(kept.contains("removed 0 entries, 0 blobs"), "{kept}");
    std::thread::sleep(Duration::from_millis(1100));
    let gone = stdout_of(&cache_command(&machine, &url, &["gc", "--remote", "--older-than", "1s"]));
    assert!(!gone.contains("removed 0 entries"), "{gone}");
    let du = stdout_of(&cache_command(&machine, &url, &["du", "--remote"]));
    assert!(du.contains("in 0 blobs") && du.contains("0 tensors, 0 nodes, 0 exports"), "{du}");
}

#[test]
fn a_recipe_names_its_remote_and_the_command_line_overrides_it() {
    let shared = tempfile::tempdir().unwrap();
    let a = Machine::new();
    let header = format!("[recipe]\nname = \"ladder\"\nremote = \"file://{}\"\n", shared.path().display());
    let recipe = LADDER.replace("[recipe]\nname = \"ladder\"\n", &header);
    assert_ne!(recipe, LADDER);
    std::fs::write(a.recipe(), &recipe).unwrap();
    let run = |m: &Machine| {
        common::quantforge(&[
            "run".as_ref(),
            m.recipe().as_os_str(),
            "--json".as_ref(),
            "--cache-dir".as_ref(),
            m.cache().as_os_str(),
        ])
    };
    report(&run(&a));
    let b = Machine::new();
    std::fs::write(b.recipe(), &recipe).unwrap();
    assert_eq!(encoded(&report(&run(&b))), 0, "the recipe's remote served the second machine");

    let elsewhere = tempfile::tempdir().unwrap();
    let c = Machine::new();
    std::fs::write(c.recipe(), &recipe).unwrap();
    let url = format!("file://{}", elsewhere.path().display());
    assert!(encoded(&report(&c.run(&[], &url, &[]))) > 0, "--cache-url replaces the recipe's remote");

    let secret = recipe.replace(&format!("file://{}", shared.path().display()), "s3://user:hunter2@bucket/x");
    std::fs::write(c.recipe(), secret).unwrap();
    let out = run(&c);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("AWS_ACCESS_KEY_ID") && !stderr.contains("hunter2"), "{stderr}");
}
