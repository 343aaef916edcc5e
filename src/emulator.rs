//! `fdsync emulator`: the upstream service, offline, on loopback by default.

use std::net::SocketAddr;

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use fdsync_core::clock::Clock;
use fdsync_emulator::{self as emulator, Account, EmulatorConfig, HeaderForm};

/// Serve the upstream API from local synthetic data (loopback by default).
///
/// Built-in keys: pk_live_emulator_free_0001 (Free plan: 30/min, 250/day) and
/// pk_live_emulator_build_0001 (Build: 300/min, 100,000/month).
///
/// Example: fdsync emulator --addr 127.0.0.1:8080 --key pk_live_mine=scale:60:5000
#[derive(Args)]
pub struct EmulatorArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8080")]
    addr: SocketAddr,
    /// Seed of the synthetic world: same seed and clock, same bytes.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Simulated clock speed relative to real time (60 = an hour a minute).
    #[arg(long, default_value_t = 1.0)]
    speed: f64,
    /// Simulated clock start (RFC 3339); default now.
    #[arg(long)]
    start: Option<chrono::DateTime<chrono::Utc>>,
    /// Add an account with one key: KEY=PLAN[+credits:USD], PLAN being free, build or
    /// scale:PER_MINUTE[:PER_MONTH]; prepaid credits pay for requests past the quota
    /// (repeatable).
    #[arg(long = "key", value_name = "KEY=PLAN")]
    keys: Vec<String>,
    /// Rate-limit header form in responses.
    #[arg(long, value_enum, default_value_t = HeaderFormArg::Legacy)]
    header_form: HeaderFormArg,
    /// Generated companies (S0000...) beside the named ones.
    #[arg(long, default_value_t = 5000)]
    companies: u64,
    /// Seconds between `: ping` comments on the news stream.
    #[arg(long, default_value_t = 15.0)]
    stream_ping_secs: f64,
    /// Seconds after which the server closes a news stream.
    #[arg(long, default_value_t = 280.0)]
    stream_close_secs: f64,
    /// Inject faults into data routes, e.g. 5xx=0.1,reset=0.05,truncate=0.05,slow=0.1,slow_ms=200.
    #[arg(long, value_name = "SPEC", value_parser = emulator::Faults::parse)]
    faults: Option<emulator::Faults>,
    /// Behave as a broken or compromised service would, on every data route:
    /// redirect=URL, absurd_headers, stuck_cursors, huge_body, endless_frame
    /// (comma-separated). For testing clients; see docs/emulator.md.
    #[arg(long, value_name = "SPEC", value_parser = emulator::Hostile::parse)]
    hostile: Option<emulator::Hostile>,
    /// Which of the wire contract's legal shapes to serve: `contract` (its
    /// examples) or `other` (dates as timestamps, timestamps at an offset,
    /// numbers in exponent form, null optionals left out, keys reordered,
    /// an unnamed field in every object). For testing clients.
    #[arg(long, value_name = "SHAPES", default_value = "contract", value_parser = emulator::WireShapes::parse)]
    shapes: emulator::WireShapes,
    /// Make the other choices a real service may make where the specification
    /// is open, and its likely slips: page_cap=N (the wire and latest serve at
    /// most N a page), rename=FAMILIES or null=FAMILIES (a list served as `data`
    /// or `null`: wire, geo, filings, monthly_revenue, regulation, ... or all),
    /// unpadded_ciks, after_newest_first, empty_texts, offsetless_timestamps,
    /// bare_429, withhold_page=OFFSET (comma-separated). See docs/emulator.md.
    #[arg(long, value_name = "SPEC", value_parser = emulator::Quirks::parse)]
    quirks: Option<emulator::Quirks>,
    /// Minutes between 8-K filings on the wire, from 2004 on: 30 is 48 a
    /// day; 2880 a sparse wire (one every two days), 5 a dense one (288 a day).
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(i64).range(1..=525_600))]
    filing_spacing_minutes: i64,
    /// Serve the admin interface (create, rotate and revoke keys; advance the
    /// simulated clock; set faults; counters) on this address. Not part of the
    /// public API: keep it on loopback. See docs/emulator.md.
    #[arg(long, value_name = "ADDR")]
    admin_addr: Option<SocketAddr>,
    /// Seconds a revoked key keeps working on the data routes, in emulator time.
    #[arg(long, default_value_t = 60.0)]
    revoke_delay_secs: f64,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum HeaderFormArg {
    Legacy,
    Ietf,
    Both,
}

pub async fn run(args: EmulatorArgs) -> Result<()> {
    let mut config = EmulatorConfig {
        seed: args.seed,
        clock: if args.speed == 1.0 && args.start.is_none() {
            Clock::System
        } else {
            Clock::simulated(args.start.unwrap_or_else(chrono::Utc::now), args.speed)
        },
        header_form: match args.header_form {
            HeaderFormArg::Legacy => HeaderForm::Legacy,
            HeaderFormArg::Ietf => HeaderForm::Ietf,
            HeaderFormArg::Both => HeaderForm::Both,
        },
        generated_companies: args.companies,
        faults: args.faults.unwrap_or_default(),
        hostile: args.hostile.unwrap_or_default(),
        shapes: args.shapes,
        quirks: args.quirks.unwrap_or_default(),
        filing_spacing_minutes: args.filing_spacing_minutes,
        stream: emulator::StreamTiming {
            ping: std::time::Duration::from_secs_f64(args.stream_ping_secs.max(0.01)),
            close_after: std::time::Duration::from_secs_f64(args.stream_close_secs.max(0.01)),
            ..Default::default()
        },
        revoke_delay: chrono::Duration::milliseconds((args.revoke_delay_secs.max(0.0) * 1000.0) as i64),
        ..EmulatorConfig::default()
    };
    for (i, spec) in args.keys.iter().enumerate() {
        let account = Account::from_spec(format!("cli-{}", i + 1), spec).map_err(|e| anyhow::anyhow!("--key: {e}"))?;
        config.accounts.push(account);
    }
    let addr = args.addr;
    let running = emulator::spawn(config, addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))?;
    tracing::info!(message = "Emulator listening.", addr = %running.addr);
    println!("fdsync emulator on {} (Ctrl-C stops it)", running.base_url());
    // Held until exit: dropping it would stop the admin listener.
    let _admin = match args.admin_addr {
        Some(admin_addr) => {
            let (bound, shutdown) = emulator::serve(running.emulator.admin_router(), admin_addr)
                .await
                .with_context(|| format!("--admin-addr: cannot listen on {admin_addr}"))?;
            println!("admin interface on http://{bound}/admin (not part of the public API)");
            Some(shutdown)
        }
        None => None,
    };
    tokio::signal::ctrl_c().await?;
    Ok(())
}
