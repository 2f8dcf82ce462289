//! `relinkd CONFIG.toml`: run the relink block daemon of a configuration
//! file (see the `relinkd` library's docs) until SIGTERM or SIGINT.

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let (Some(path), None) = (args.next(), args.next()) else {
        eprintln!("usage: relinkd CONFIG.toml");
        return ExitCode::from(2);
    };
    let path = PathBuf::from(path);
    let config = match relinkd::Config::load(&path) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("relinkd: {e}");
            return ExitCode::from(2);
        }
    };
    if matches!(config.backend, relinkd::Backend::RdmaCore { .. }) {
        // Still the only thread: destroys on a lost device then succeed.
        if let Err(e) = relink_verbs::init_environment() {
            eprintln!("relinkd: warning: {e}");
        }
    }
    match relinkd::run(&config) {
        Ok(summary) => {
            println!(
                "relinkd stopped: sessions closed cleanly: {}{}",
                summary.clean_sessions,
                if summary.timed_out {
                    ", shutdown timed out"
                } else {
                    ""
                }
            );
            if summary.sync_failures.is_empty() {
                ExitCode::SUCCESS
            } else {
                for f in summary.sync_failures {
                    eprintln!("relinkd: sync failed: {f}");
                }
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("relinkd: {e}");
            ExitCode::FAILURE
        }
    }
}
