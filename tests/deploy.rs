//! The files in `deploy/` are checked, not just shipped: systemd units by
//! `systemd-analyze verify`, Kubernetes manifests parsed and cross-checked
//! (names, mounts, schedule, configuration, command line), the Dockerfile's
//! sources present.

use std::path::Path;

use fdsync_core::config::Config;
use yaml_rust2::{Yaml, YamlLoader};

use crate::util::repo;

fn manifests() -> Vec<(String, Yaml)> {
    let dir = repo().join("deploy/kubernetes");
    let mut docs = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        for doc in YamlLoader::load_from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display())) {
            let kind = doc["kind"]
                .as_str()
                .unwrap_or_else(|| panic!("{}: no kind", path.display()));
            docs.push((kind.to_owned(), doc));
        }
    }
    docs
}

fn one<'a>(docs: &'a [(String, Yaml)], kind: &str) -> &'a Yaml {
    let found: Vec<&Yaml> = docs.iter().filter(|(k, _)| k == kind).map(|(_, d)| d).collect();
    assert_eq!(found.len(), 1, "one {kind}");
    found[0]
}

fn text<'a>(y: &'a Yaml, what: &str) -> &'a str {
    y.as_str()
        .unwrap_or_else(|| panic!("{what}: expected a string, got {y:?}"))
}

/// A pod spec's mounts all name volumes that exist, and its volumes name the
/// PVC, Secret and ConfigMap defined beside it.
fn check_pod(pod: &Yaml, docs: &[(String, Yaml)], args_ok: impl Fn(&[String])) {
    let pvc = text(&one(docs, "PersistentVolumeClaim")["metadata"]["name"], "pvc name");
    let secret = text(&one(docs, "Secret")["metadata"]["name"], "secret name");
    let configmap = text(&one(docs, "ConfigMap")["metadata"]["name"], "configmap name");
    let volumes = pod["volumes"].as_vec().unwrap();
    let names: Vec<&str> = volumes.iter().map(|v| text(&v["name"], "volume name")).collect();
    for v in volumes {
        if !v["persistentVolumeClaim"].is_badvalue() {
            assert_eq!(text(&v["persistentVolumeClaim"]["claimName"], "claimName"), pvc);
        }
        if !v["secret"].is_badvalue() {
            assert_eq!(text(&v["secret"]["secretName"], "secretName"), secret);
        }
        if !v["configMap"].is_badvalue() {
            assert_eq!(text(&v["configMap"]["name"], "configMap"), configmap);
        }
    }
    // Pod Security "restricted".
    assert_eq!(pod["securityContext"]["runAsNonRoot"].as_bool(), Some(true));
    assert_eq!(
        text(&pod["securityContext"]["seccompProfile"]["type"], "seccompProfile"),
        "RuntimeDefault"
    );
    let container = &pod["containers"][0];
    assert_eq!(
        container["securityContext"]["allowPrivilegeEscalation"].as_bool(),
        Some(false)
    );
    assert_eq!(
        container["securityContext"]["capabilities"]["drop"][0].as_str(),
        Some("ALL")
    );
    for m in container["volumeMounts"].as_vec().unwrap() {
        assert!(
            names.contains(&text(&m["name"], "mount")),
            "mount {m:?} names no volume"
        );
    }
    let mounts: Vec<(&str, &str)> = container["volumeMounts"]
        .as_vec()
        .unwrap()
        .iter()
        .map(|m| (text(&m["name"], "name"), text(&m["mountPath"], "mountPath")))
        .collect();
    let config_text = text(&one(docs, "ConfigMap")["data"]["fdsync.toml"], "fdsync.toml");
    let config = Config::from_toml(config_text, Path::new("configmap"), std::iter::empty()).unwrap();
    let key_file = config
        .upstream
        .api_key_file
        .clone()
        .expect("the key comes from the mounted secret");
    let secret_volume = volumes.iter().find(|v| !v["secret"].is_badvalue()).unwrap();
    let secret_mount = mounts
        .iter()
        .find(|(n, _)| *n == text(&secret_volume["name"], "name"))
        .unwrap();
    let secret_key = one(docs, "Secret")["stringData"]
        .as_hash()
        .unwrap()
        .keys()
        .next()
        .unwrap();
    assert_eq!(
        key_file,
        Path::new(secret_mount.1).join(text(secret_key, "secret key")),
        "api_key_file is the mounted secret's file"
    );
    let warehouse_mount = mounts
        .iter()
        .find(|(n, _)| names.contains(n) && n.contains("warehouse"))
        .unwrap();
    assert!(
        config.warehouse.duckdb.starts_with(warehouse_mount.1),
        "the warehouse lives on the volume"
    );
    let args: Vec<String> = container["args"]
        .as_vec()
        .unwrap()
        .iter()
        .map(|a| text(a, "arg").to_owned())
        .collect();
    args_ok(&args);
}

/// The container's arguments are a command line the binary accepts.
fn accepted(args: &[String]) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_fdsync"))
        .args(args)
        .arg("--help")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn kubernetes_manifests_are_valid_and_agree_with_each_other() {
    let docs = manifests();
    let cron = one(&docs, "CronJob");
    let schedule = text(&cron["spec"]["schedule"], "schedule");
    fdsync_core::pipeline::parse_schedule(schedule).unwrap();
    assert_eq!(text(&cron["spec"]["concurrencyPolicy"], "concurrencyPolicy"), "Forbid");
    let job = &cron["spec"]["jobTemplate"]["spec"];
    let codes: Vec<i64> = job["podFailurePolicy"]["rules"][0]["onExitCodes"]["values"]
        .as_vec()
        .unwrap()
        .iter()
        .map(|v| v.as_i64().unwrap())
        .collect();
    assert_eq!(codes, [2, 75], "no retry where retrying cannot help");
    assert_eq!(
        job["backoffLimit"].as_i64(),
        Some(0),
        "a failed run is retried by fdsync's own backoff at the next firing, not tripled"
    );
    // Auto schedules are derived for the timer the CronJob runs.
    let env = job["template"]["spec"]["containers"][0]["env"].as_vec().unwrap();
    let timer = env
        .iter()
        .find(|e| e["name"].as_str() == Some("FDSYNC_PIPELINES__TIMER_MINUTES"))
        .and_then(|e| e["value"].as_str())
        .expect("the CronJob names its period");
    let cron_schedule = fdsync_core::pipeline::parse_schedule(schedule).unwrap();
    let first = cron_schedule.next_after(&chrono::Utc::now()).unwrap();
    let period = cron_schedule.next_after(&first).unwrap() - first;
    assert_eq!(
        period.num_minutes().to_string(),
        timer,
        "the CronJob's period and timer_minutes agree"
    );
    assert!(
        job["activeDeadlineSeconds"].as_i64().is_some_and(|s| s > 0),
        "a hung run is ended (SIGTERM, then a clean exit)"
    );
    check_pod(&job["template"]["spec"], &docs, |args| {
        assert!(args.ends_with(&["sync".into(), "--once".into()]), "{args:?}");
        accepted(args);
    });
    let deployment = one(&docs, "Deployment");
    assert_eq!(deployment["spec"]["replicas"].as_i64(), Some(1), "one writer");
    assert_eq!(text(&deployment["spec"]["strategy"]["type"], "strategy"), "Recreate");
    check_pod(&deployment["spec"]["template"]["spec"], &docs, |args| {
        assert_eq!(args.last().map(String::as_str), Some("daemon"));
        accepted(args);
    });
}

#[test]
fn systemd_units_pass_systemd_analyze_verify() {
    let Ok(probe) = std::process::Command::new("systemd-analyze").arg("--version").output() else {
        eprintln!("systemd-analyze is not installed: units not verified here");
        return;
    };
    assert!(probe.status.success());
    let dir = tempfile::tempdir().unwrap();
    let mut units = Vec::new();
    for entry in std::fs::read_dir(repo().join("deploy/systemd")).unwrap() {
        let path = entry.unwrap().path();
        // verify insists that ExecStart exists: point it at the binary under test.
        let unit = std::fs::read_to_string(&path)
            .unwrap()
            .replace("/usr/local/bin/fdsync", env!("CARGO_BIN_EXE_fdsync"));
        let copy = dir.path().join(path.file_name().unwrap());
        std::fs::write(&copy, unit).unwrap();
        units.push(copy);
    }
    assert_eq!(units.len(), 3, "service, oneshot service and timer");
    let out = std::process::Command::new("systemd-analyze")
        .arg("verify")
        .args(&units)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.trim().is_empty(), "warnings are mistakes too: {stderr}");
}

#[test]
fn the_dockerfile_copies_only_what_the_repository_has() {
    let dockerfile = std::fs::read_to_string(repo().join("deploy/Dockerfile")).unwrap();
    let mut copies = 0;
    for line in dockerfile.lines().map(str::trim) {
        let Some(rest) = line.strip_prefix("COPY ") else {
            continue;
        };
        if rest.starts_with("--from=") {
            continue;
        }
        let parts: Vec<&str> = rest.split_whitespace().collect();
        for source in &parts[..parts.len() - 1] {
            assert!(repo().join(source).exists(), "COPY {source}: not in the repository");
            copies += 1;
        }
    }
    assert!(copies >= 5, "{copies} sources");
    assert!(dockerfile.contains("\nUSER fdsync"), "runs unprivileged");
    assert!(
        dockerfile.contains("\nCOPY .cargo "),
        "the build stage has .cargo/config.toml, which builds jemalloc's options in"
    );
}

/// The systemd timer fires as often as its service tells `auto` schedules.
#[test]
fn the_systemd_timer_and_its_timer_minutes_agree() {
    let read = |name: &str| std::fs::read_to_string(repo().join("deploy/systemd").join(name)).unwrap();
    let timer = read("fdsync-sync.timer");
    assert!(timer.lines().any(|l| l == "OnCalendar=*:0/15"), "{timer}");
    let service = read("fdsync-sync.service");
    assert!(
        service
            .lines()
            .any(|l| l == "Environment=FDSYNC_PIPELINES__TIMER_MINUTES=15"),
        "{service}"
    );
}

/// A newcomer's Free key on the shipped timer: `fdsync plan --plan free
/// --timer-minutes 15` on the shipped config and pipelines fits (exit 0),
/// and so does the daemon's forecast, with the stream left to poll.
#[test]
fn the_shipped_config_fits_the_free_plan_on_the_shipped_timer() {
    let dir = tempfile::tempdir().unwrap();
    let plan = |extra: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_fdsync"))
            .current_dir(repo())
            .args(["--config", "config/fdsync.toml", "plan", "--plan", "free"])
            .args(extra)
            .env("FDSYNC_WAREHOUSE__DUCKDB", dir.path().join("none.duckdb"))
            .output()
            .unwrap()
    };
    let timer = plan(&["--timer-minutes", "15"]);
    let text = String::from_utf8_lossy(&timer.stdout);
    assert!(
        timer.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&timer.stderr)
    );
    assert!(text.contains("fits") && text.contains("auto ("), "{text}");
    let daemon = plan(&[]);
    let text = String::from_utf8_lossy(&daemon.stdout);
    assert!(daemon.status.success(), "{text}");
    assert!(text.contains("live stream (auto): not connected"), "{text}");
}
