//! Running a randomized suite over many seeds: every seed on the
//! machine's cores, the failures gathered with the command that replays
//! one.

/// Run `run` for one seed when `RELINK_SIM_SEED` is set, else for seeds
/// `0..n` where `n` is the number in the environment variable `count_env`
/// (default `default`), spread over up to 8 threads; panic with the first
/// five failures (each with its seed) if any seed failed.
///
/// # Panics
/// When a seed fails, or an environment variable is not a number.
pub fn run_seeds(count_env: &str, default: u64, run: fn(u64) -> Result<(), String>) {
    if let Ok(one) = std::env::var("RELINK_SIM_SEED") {
        let seed: u64 = one.parse().expect("RELINK_SIM_SEED must be a number");
        if let Err(e) = run(seed) {
            panic!("seed {seed} failed:\n  {e}");
        }
        return;
    }
    let n: u64 = std::env::var(count_env).ok().map_or(default, |s| {
        s.parse()
            .unwrap_or_else(|_| panic!("{count_env} must be a number"))
    });
    let threads = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .min(8) as u64;
    let failures: Vec<(u64, String)> = std::thread::scope(|sc| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                sc.spawn(move || {
                    (0..n)
                        .filter(|s| s % threads == t)
                        .filter_map(|seed| run(seed).err().map(|e| (seed, e)))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("thread"))
            .collect()
    });
    if !failures.is_empty() {
        let mut msg = format!(
            "{} of {n} seeds failed; replay one with RELINK_SIM_SEED=<seed>\n",
            failures.len()
        );
        for (seed, e) in failures.iter().take(5) {
            msg += &format!("seed {seed}:\n  {e}\n");
        }
        panic!("{msg}");
    }
    eprintln!("{n} seeds passed");
}
