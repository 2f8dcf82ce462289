//! # relink-proctest — child processes for the end-to-end tests
//!
//! The tests and benches that run relink's binaries as processes (the
//! `relink` CLI, the examples, relinkd) all watch them the same way, and
//! this crate is that one way:
//!
//! - [`Proc::spawn`] starts a [`Command`] with its stdout and stderr
//!   piped; two threads collect their lines as they come.
//! - [`Proc::wait_until`] waits, with a bound, until a condition on the
//!   output holds (a line printed, a count reached), waking at every new
//!   line rather than on a timer.
//! - [`Proc::wait_exit`] waits, with a bound, for the exit and then for
//!   the last lines; [`Proc::signal`] sends a signal and waits for the
//!   exit.
//! - [`Proc::transcript`] is everything it printed, for failure messages;
//!   dropping a `Proc` that has not exited kills it, so a failing test
//!   leaves no process behind.
//!
//! [`nbdinfo::data_extents`] reads what `nbdinfo --map` printed;
//! [`netns`] makes hosts of network namespaces (a [`netns::Star`] of one
//! hub and up to eight spokes on a bridge).
//!
//! Nothing here measures time: the bounds only keep a hang from lasting
//! forever on a slow, shared machine. Panicking is left to the callers,
//! which know what they waited for and whose transcripts explain it.

pub mod nbdinfo;
pub mod netns;

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

/// How long [`Proc::wait_exit`] waits for the last output lines once the
/// process exited (a grandchild holding a pipe open would otherwise keep
/// it waiting).
const OUTPUT_AFTER_EXIT: Duration = Duration::from_secs(10);

/// What the collecting threads share with the [`Proc`].
#[derive(Default)]
struct Output {
    state: Mutex<Lines>,
    changed: Condvar,
}

#[derive(Default)]
struct Lines {
    stdout: Vec<String>,
    stderr: Vec<String>,
    /// Pipes still open (2 at the start).
    open: u8,
    /// Bumped at every line and at every pipe's end.
    generation: u64,
}

impl Output {
    fn lock(&self) -> MutexGuard<'_, Lines> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Collects `pipe`'s lines into stdout (`err` false) or stderr.
    fn collect(self: &Arc<Self>, pipe: impl Read + Send + 'static, err: bool) {
        let out = Arc::clone(self);
        thread::spawn(move || {
            for line in BufReader::new(pipe).lines() {
                let Ok(line) = line else { break };
                let mut l = out.lock();
                if err {
                    l.stderr.push(line);
                } else {
                    l.stdout.push(line);
                }
                l.generation += 1;
                drop(l);
                out.changed.notify_all();
            }
            let mut l = out.lock();
            l.open -= 1;
            l.generation += 1;
            drop(l);
            out.changed.notify_all();
        });
    }
}

/// A running child process whose output lines are collected as they come;
/// killed on drop unless it exited.
pub struct Proc {
    what: String,
    child: Child,
    stdin: Option<ChildStdin>,
    output: Arc<Output>,
    status: Option<ExitStatus>,
}

impl Proc {
    /// Starts `command` with its standard input empty and its stdout and
    /// stderr collected. `what` names it in messages ("server", "target").
    ///
    /// # Panics
    /// If the process cannot be started.
    #[track_caller]
    pub fn spawn(what: &str, command: &mut Command) -> Proc {
        Proc::start(what, command.stdin(Stdio::null()))
    }

    /// [`spawn`](Proc::spawn) with a pipe to its standard input, written
    /// through [`stdin`](Proc::stdin) and closed by
    /// [`close_stdin`](Proc::close_stdin).
    ///
    /// # Panics
    /// If the process cannot be started.
    #[track_caller]
    pub fn spawn_with_stdin(what: &str, command: &mut Command) -> Proc {
        Proc::start(what, command.stdin(Stdio::piped()))
    }

    #[track_caller]
    fn start(what: &str, command: &mut Command) -> Proc {
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn the {what} ({command:?}): {e}"));
        let output = Arc::new(Output::default());
        output.lock().open = 2;
        output.collect(child.stdout.take().expect("piped stdout"), false);
        output.collect(child.stderr.take().expect("piped stderr"), true);
        Proc {
            what: what.to_string(),
            stdin: child.stdin.take(),
            child,
            output,
            status: None,
        }
    }

    /// What it is, for messages.
    #[must_use]
    pub fn what(&self) -> &str {
        &self.what
    }

    /// Its process id.
    #[must_use]
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The pipe to its standard input, while open (see
    /// [`spawn_with_stdin`](Proc::spawn_with_stdin)).
    pub fn stdin(&mut self) -> Option<&mut ChildStdin> {
        self.stdin.as_mut()
    }

    /// Closes its standard input: it reads end of file.
    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// Its stdout lines so far.
    #[must_use]
    pub fn stdout(&self) -> Vec<String> {
        self.output.lock().stdout.clone()
    }

    /// Its stderr lines so far.
    #[must_use]
    pub fn stderr(&self) -> Vec<String> {
        self.output.lock().stderr.clone()
    }

    /// How many stdout lines contain `needle`.
    #[must_use]
    pub fn stdout_count(&self, needle: &str) -> usize {
        count(&self.output.lock().stdout, needle)
    }

    /// How many stderr lines contain `needle`.
    #[must_use]
    pub fn stderr_count(&self, needle: &str) -> usize {
        count(&self.output.lock().stderr, needle)
    }

    /// How many stdout or stderr lines contain `needle`.
    #[must_use]
    pub fn count(&self, needle: &str) -> usize {
        let l = self.output.lock();
        count(&l.stdout, needle) + count(&l.stderr, needle)
    }

    /// Everything it printed so far, stdout then stderr, for messages.
    #[must_use]
    pub fn transcript(&self) -> String {
        let l = self.output.lock();
        format!(
            "--- {} stdout:\n{}\n--- {} stderr:\n{}",
            self.what,
            l.stdout.join("\n"),
            self.what,
            l.stderr.join("\n")
        )
    }

    /// Waits until `done(self)` holds, checking it again at every new
    /// output line: `true` then; `false` once `timeout` passed, or once
    /// both pipes closed (it exited) with `done` still false.
    pub fn wait_until(&self, timeout: Duration, mut done: impl FnMut(&Proc) -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            let seen = self.output.lock().generation;
            if done(self) {
                return true;
            }
            let mut l = self.output.lock();
            while l.generation == seen {
                if l.open == 0 {
                    return false;
                }
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    drop(l);
                    return done(self);
                }
                l = self
                    .output
                    .changed
                    .wait_timeout(l, left)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
        }
    }

    /// Its exit status if it exited (without waiting).
    pub fn exited(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.child.try_wait().ok().flatten();
        }
        self.status
    }

    /// Waits up to `timeout` for it to exit, then (up to 10 s more) for
    /// its last output lines: its status, or `None` if it is still
    /// running.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        while self.exited().is_none() {
            if Instant::now() >= deadline {
                return None;
            }
            thread::sleep(Duration::from_millis(10));
        }
        self.wait_until(OUTPUT_AFTER_EXIT, |p| p.output.lock().open == 0);
        self.status
    }

    /// Sends `signal` (a name `kill -s` takes: "TERM", "KILL", "HUP") and
    /// waits up to `timeout` for the exit, as [`wait_exit`](Proc::wait_exit).
    ///
    /// # Panics
    /// If `kill` cannot be run or refuses the signal.
    #[track_caller]
    pub fn signal(&mut self, signal: &str, timeout: Duration) -> Option<ExitStatus> {
        let ok = Command::new("kill")
            .args(["-s", signal, &self.pid().to_string()])
            .status()
            .unwrap_or_else(|e| panic!("run kill: {e}"));
        assert!(ok.success(), "kill -s {signal} the {}", self.what);
        self.wait_exit(timeout)
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.exited().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The transcripts of `procs`, one after the other.
#[must_use]
pub fn transcripts(procs: &[&Proc]) -> String {
    procs
        .iter()
        .map(|p| p.transcript())
        .collect::<Vec<_>>()
        .join("\n")
}

fn count(lines: &[String], needle: &str) -> usize {
    lines.iter().filter(|l| l.contains(needle)).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Command {
        let mut c = Command::new("sh");
        c.args(["-c", script]);
        c
    }

    #[test]
    fn lines_of_both_streams_are_collected_and_waited_for() {
        let mut p = Proc::spawn("shell", &mut sh("echo one; echo two >&2; echo three"));
        assert!(p.wait_until(Duration::from_secs(30), |p| p.stdout_count("three") == 1));
        assert_eq!(
            p.wait_exit(Duration::from_secs(30)).and_then(|s| s.code()),
            Some(0)
        );
        assert_eq!(p.stdout(), ["one", "three"]);
        assert_eq!(p.stderr(), ["two"]);
        assert_eq!(p.count("t"), 2);
        assert!(p.transcript().contains("--- shell stderr:\ntwo"));
    }

    #[test]
    fn a_wait_ends_false_when_the_process_ends_without_the_line() {
        let mut p = Proc::spawn("shell", &mut sh("echo nothing; exit 3"));
        assert!(!p.wait_until(Duration::from_secs(30), |p| p.stdout_count("ready") > 0));
        assert_eq!(
            p.wait_exit(Duration::from_secs(30)).and_then(|s| s.code()),
            Some(3)
        );
    }

    #[test]
    fn standard_input_is_piped_and_closed_on_request() {
        let mut p = Proc::spawn_with_stdin("cat", &mut Command::new("cat"));
        use std::io::Write;
        writeln!(p.stdin().expect("piped"), "hello").unwrap();
        assert!(p.wait_until(Duration::from_secs(30), |p| p.stdout_count("hello") == 1));
        p.close_stdin();
        assert_eq!(
            p.wait_exit(Duration::from_secs(30)).and_then(|s| s.code()),
            Some(0)
        );
    }

    #[test]
    fn a_signal_ends_it_and_drop_kills_a_running_one() {
        let mut p = Proc::spawn("sleeper", &mut sh("echo up; exec sleep 600"));
        assert!(p.wait_until(Duration::from_secs(30), |p| p.stdout_count("up") == 1));
        let s = p.signal("TERM", Duration::from_secs(30)).expect("exited");
        assert!(!s.success());
        let p = Proc::spawn("sleeper", &mut sh("exec sleep 600"));
        let pid = p.pid();
        drop(p);
        assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
    }
}
