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
        "the build stage has .cargo/, whose config builds jemalloc's options in and whose release.toml is the shipped build"
    );
    assert!(
        dockerfile.contains("cargo dist"),
        "the image holds the shipped build (`cargo dist`, .cargo/release.toml)"
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

/// The Dockerfile's last stage as instructions, continuation lines joined.
fn final_stage() -> Vec<(String, String)> {
    let dockerfile = std::fs::read_to_string(repo().join("deploy/Dockerfile")).unwrap();
    let joined = dockerfile.replace("\\\n", " ");
    let lines: Vec<&str> = joined.lines().map(str::trim).filter(|l| !l.starts_with('#')).collect();
    let from = lines.iter().rposition(|l| l.starts_with("FROM ")).expect("a FROM line");
    lines[from + 1..]
        .iter()
        .filter_map(|l| l.split_once(' '))
        .map(|(op, rest)| (op.to_owned(), rest.trim().to_owned()))
        .collect()
}

fn copy_tree(from: &Path, to: &Path) {
    if from.is_dir() {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            copy_tree(&entry.path(), &to.join(entry.file_name()));
        }
    } else {
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(from, to).unwrap();
    }
}

/// The image's last stage laid out without a Docker engine: its files where
/// its COPY lines put them, the release binary stripped as the build stage
/// strips it, and the stage's own test (`RUN fdsync demo ...`) run with the
/// stage's ENV. As root it runs chrooted there as the image's user, with no
/// library in that root: the binary is static and needs none.
#[test]
#[cfg(target_os = "linux")]
fn the_image_runs_its_own_test_with_the_stripped_release_binary() {
    // The image holds the shipped build (`cargo dist`), static on Linux.
    crate::tools::needs!(ReleaseBinary);
    let stage = final_stage();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let at = |path: &str| root.join(path.trim_start_matches('/'));
    let mut env: Vec<(String, String)> = Vec::new();
    let mut demo: Option<Vec<String>> = None;
    let mut binary = None;
    let mut uid = None;
    for (op, rest) in &stage {
        match op.as_str() {
            "RUN" if rest.contains("useradd ") => {
                let words: Vec<&str> = rest.split_whitespace().collect();
                uid = words.windows(2).find(|w| w[0] == "--uid").map(|w| w[1].to_owned());
                // Debian's ca-certificates package, as the stage installs it:
                // the HTTP client will not start without a trust store.
                if words.contains(&"ca-certificates") {
                    let bundle = "etc/ssl/certs/ca-certificates.crt";
                    std::fs::create_dir_all(at(bundle).parent().unwrap()).unwrap();
                    std::fs::copy(Path::new("/").join(bundle), at(bundle))
                        .expect("this machine's CA bundle at /etc/ssl/certs/ca-certificates.crt");
                }
            }
            "COPY" if rest.starts_with("--from=build ") => {
                let dest = rest.split_whitespace().last().unwrap();
                binary = Some(dest.to_owned());
                std::fs::create_dir_all(at(dest).parent().unwrap()).unwrap();
                std::fs::copy(crate::tools::release_binary(), at(dest)).unwrap();
                let strip = std::process::Command::new("strip").arg(at(dest)).status();
                assert!(strip.expect("strip (binutils) runs").success());
            }
            "COPY" => {
                let parts: Vec<&str> = rest.split_whitespace().collect();
                let (dest, sources) = parts.split_last().unwrap();
                for source in sources {
                    copy_tree(&repo().join(source), &at(dest));
                }
            }
            "ENV" => {
                for pair in rest.split_whitespace() {
                    let (key, value) = pair.split_once('=').expect("ENV KEY=VALUE");
                    env.push((key.to_owned(), value.to_owned()));
                }
            }
            "RUN" if rest.starts_with("fdsync demo ") => {
                let command = rest.split(['>', '|', ';']).next().unwrap();
                demo = Some(command.split_whitespace().map(str::to_owned).collect());
            }
            _ => {}
        }
    }
    let binary = binary.expect("the last stage copies the binary from the build stage");
    let demo = demo.expect("the last stage runs `fdsync demo` as the image's test");
    let uid = uid.expect("the last stage makes the image's user with --uid");
    assert_eq!(binary, "/usr/local/bin/fdsync");
    for made in ["tmp", "var/lib/fdsync"] {
        std::fs::create_dir_all(at(made)).unwrap();
    }
    let finished = |out: std::process::Output, how: &str| {
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("== rows in the warehouse") && stdout.contains("Open it yourself"),
            "the image's test failed {how}:\n{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };

    // Outside a chroot, the image's absolute paths point into the laid-out root.
    let inside = |value: &str| {
        if value.starts_with('/') {
            at(value).display().to_string()
        } else {
            value.to_owned()
        }
    };
    let out = std::process::Command::new(at(&binary))
        .args(demo[1..].iter().map(|a| inside(a)))
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k.clone(), inside(v))))
        .current_dir(at("var/lib/fdsync"))
        .output()
        .unwrap();
    finished(out, "with the image's files");

    if crate::tools::missing_for("chrooted as the image's user", &[crate::tools::Tool::Root]).is_some() {
        return;
    }
    // As the RUN line does after its demo, so the image's user starts from an empty /tmp.
    std::fs::remove_dir_all(at("tmp")).unwrap();
    std::fs::create_dir_all(at("tmp")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(at("tmp"), std::fs::Permissions::from_mode(0o1777)).unwrap();
    // The devices every container runtime makes: a static glibc has no
    // dlsym for the getrandom wrapper, so randomness comes from /dev/urandom.
    std::fs::create_dir_all(at("dev")).unwrap();
    for (name, minor) in [("null", "3"), ("zero", "5"), ("random", "8"), ("urandom", "9")] {
        let made = std::process::Command::new("mknod")
            .args(["-m", "666"])
            .arg(at(&format!("dev/{name}")))
            .args(["c", "1", minor])
            .status();
        assert!(made.expect("mknod (coreutils) runs").success());
    }
    let libraries = ["lib", "lib64", "usr/lib"].iter().filter(|l| at(l).exists()).count();
    assert_eq!(libraries, 0, "the root holds no shared libraries");
    // Found on this PATH: the child's PATH, which names only the image's, would not hold it.
    let chroot = std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join("chroot"))
        .find(|path| path.is_file())
        .expect("chroot (coreutils) is on the PATH");
    let out = std::process::Command::new(chroot)
        .arg(format!("--userspec={uid}:{uid}"))
        .arg(&root)
        .args(&demo)
        .env_clear()
        .envs(env.iter().cloned())
        .env("PATH", "/usr/local/bin")
        .env("HOME", "/var/lib/fdsync")
        .output()
        .expect("chroot (coreutils) runs");
    finished(out, "chrooted as the image's user");
}

/// The wheel (`maturin build`, pyproject.toml): built, installed into a
/// fresh virtual environment, and run from a folder outside the checkout:
/// `--help`, `demo` with the built-in config and pipelines, and `init`.
#[test]
fn the_wheel_installs_into_a_fresh_venv_and_runs_from_any_folder() {
    crate::tools::needs!(Python);
    let maturin = crate::tools::venv_bin("maturin");
    assert!(maturin.exists(), "tests/requirements.txt installs maturin");
    // The target folder of this very build, so maturin reuses its DuckDB.
    let target = Path::new(env!("CARGO_BIN_EXE_fdsync"))
        .ancestors()
        .nth(2)
        .expect("<target>/release/fdsync")
        .to_owned();
    let dist = tempfile::tempdir().unwrap();
    let run = |cmd: &mut std::process::Command| {
        let out = cmd.output().unwrap();
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "{cmd:?}: {said}");
        said
    };
    run(std::process::Command::new(&maturin)
        .args(["build", "--release", "--out"])
        .arg(dist.path())
        .current_dir(repo())
        .env("CARGO_TARGET_DIR", &target));
    let wheel = std::fs::read_dir(dist.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .expect("a wheel");
    let size = std::fs::metadata(&wheel).unwrap().len();
    println!("wheel {}: {:.1} MiB", wheel.display(), size as f64 / 1048576.0);

    let outside = tempfile::tempdir().unwrap();
    let venv = outside.path().join("venv");
    run(std::process::Command::new("python3").args(["-m", "venv"]).arg(&venv));
    run(std::process::Command::new(venv.join("bin/pip"))
        .args(["install", "--no-index", "--quiet"])
        .arg(&wheel));
    let fdsync = venv.join("bin/fdsync");
    assert!(fdsync.exists(), "the wheel puts fdsync in the venv's bin");
    let work = outside.path().join("work");
    std::fs::create_dir(&work).unwrap();
    // Nothing of the checkout is reachable: no config in the folder, none given.
    let fdsync_in = |args: &[&str]| {
        let mut cmd = std::process::Command::new(&fdsync);
        cmd.args(args)
            .current_dir(&work)
            .env_remove("FDSYNC_CONFIG")
            .env("HOME", outside.path())
            .env_remove("XDG_CONFIG_HOME");
        cmd
    };
    let help = run(&mut fdsync_in(&["--help"]));
    assert!(help.contains("fdsync demo"), "{help}");
    let demo = run(&mut fdsync_in(&["demo"]));
    assert!(
        demo.contains("config: the built-in default") && demo.contains("pipelines: built in"),
        "{demo}"
    );
    assert!(demo.contains("Open it yourself"), "{demo}");
    assert!(work.join("data/demo.duckdb").is_file());
    let init = run(&mut fdsync_in(&["init", "project"]));
    let shipped = format!("{} pipelines", fdsync_core::pipeline::SHIPPED.len());
    assert!(init.contains(&shipped), "{init}");
    assert!(work.join("project/config/fdsync.toml").is_file());
    let again = fdsync_in(&["init", "project"]).output().unwrap();
    assert_eq!(again.status.code(), Some(2), "init never overwrites");
}
