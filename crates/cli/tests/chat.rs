//! `ferrolm chat` on the default model, driven through a pipe: turns, cache reuse, commands,
//! Ctrl-C (SIGINT) during a reply and at the prompt, and a conversation outgrowing the context.

use std::io::{Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(120);

/// Greedy, verbose, and `-n 16` unless `n_predict` says otherwise.
fn chat(n_predict: usize, extra: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ferrolm"));
    c.args([
        "chat",
        "--temp",
        "0",
        "-t",
        "2",
        "-v",
        "-n",
        &n_predict.to_string(),
    ])
    .args(extra);
    c
}

/// Runs a whole session on `input` and returns (exit code, stdout, stderr).
fn piped(extra: &[&str], input: &str) -> (Option<i32>, String, String) {
    let mut child = chat(16, extra)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let text = |b: Vec<u8>| String::from_utf8(b).unwrap();
    (out.status.code(), text(out.stdout), text(out.stderr))
}

/// `turn N: prompt X new tokens (Y cached), ... | generation Z tokens, ...` as (X, Y, Z).
fn turn_counts(line: &str) -> (usize, usize, usize) {
    let num = |after: &str| -> usize {
        let rest = &line[line.find(after).unwrap() + after.len()..];
        rest[..rest.find(|c: char| !c.is_ascii_digit()).unwrap()]
            .parse()
            .unwrap()
    };
    (num("prompt "), num("new tokens ("), num("generation "))
}

fn turn_lines(stderr: &str) -> Vec<&str> {
    stderr.lines().filter(|l| l.starts_with("turn ")).collect()
}

#[test]
fn two_turns_reuse_the_cache() {
    let (code, out, err) = piped(&[], "Hi, who are you?\nWhat is the capital of France?\n");
    assert_eq!(code, Some(0), "{err}");
    let turns = turn_lines(&err);
    assert_eq!(turns.len(), 2, "{err}");
    let (new1, cached1, gen1) = turn_counts(turns[0]);
    let (new2, cached2, gen2) = turn_counts(turns[1]);
    assert_eq!(cached1, 0);
    assert!(gen1 > 0 && gen2 > 0, "{err}");
    assert!(
        out.lines().filter(|l| !l.trim().is_empty()).count() >= 2,
        "{out:?}"
    );
    // The whole first prompt, and most of the reply, come from the cache.
    assert!(cached2 >= new1 + gen1 / 2, "{err}");
    assert!(
        new2 * 3 < new2 + cached2,
        "turn 2 re-evaluated too much: {err}"
    );
}

#[test]
fn exit_command_and_blank_lines() {
    let (code, out, err) = piped(&[], "\n   \n/exit\nnever answered\n");
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, "");
    assert!(turn_lines(&err).is_empty(), "{err}");
}

#[test]
fn a_message_that_overflows_the_context_is_dropped_and_the_chat_goes_on() {
    let long = "word ".repeat(60);
    let input = format!("Hi\n{long}\n/reset\nHi\n");
    let (code, _out, err) = piped(&["-c", "96", "--system", "Be brief."], &input);
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("error: the conversation is"), "{err}");
    assert!(err.contains("(new conversation)"), "{err}");
    let turns = turn_lines(&err);
    assert_eq!(turns.len(), 2, "{err}");
    // After /reset the same first message renders the same prompt: all but one token cached.
    let (new1, _, _) = turn_counts(turns[0]);
    let (new2, cached2, _) = turn_counts(turns[1]);
    assert_eq!((new2, cached2), (1, new1 - 1), "{err}");
}

/// A session kept open, with its output read as it comes.
struct Live {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Receiver<u8>,
    stderr: Receiver<String>,
}

impl Live {
    fn start(n_predict: usize) -> Self {
        let mut child = chat(n_predict, &[])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (otx, stdout) = channel();
        let mut out = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            let mut b = [0u8];
            while out.read(&mut b).unwrap_or(0) == 1 && otx.send(b[0]).is_ok() {}
        });
        let (etx, stderr) = channel();
        let err = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(err).lines() {
                if etx.send(line.unwrap()).is_err() {
                    return;
                }
            }
        });
        let stdin = child.stdin.take();
        Self {
            child,
            stdin,
            stdout,
            stderr,
        }
    }

    fn say(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
    }

    /// The next stderr line that starts with `prefix`.
    fn wait_stderr(&self, prefix: &str) -> String {
        loop {
            let line = self.stderr.recv_timeout(WAIT).expect("stderr line");
            if line.starts_with(prefix) {
                return line;
            }
        }
    }

    fn sigint(&self) {
        // SAFETY: kill(2) on our own child's pid.
        let rc = unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGINT) };
        assert_eq!(rc, 0);
    }

    fn drain_stdout(&self) -> String {
        String::from_utf8_lossy(&self.stdout.try_iter().collect::<Vec<u8>>()).into_owned()
    }

    fn wait(mut self) -> Option<i32> {
        drop(self.stdin.take());
        self.child.wait().unwrap().code()
    }
}

#[test]
fn sigint_during_a_reply_stops_it_and_the_chat_goes_on() {
    let mut s = Live::start(1000);
    s.say("Write a very long story about a dragon who learns to count to one thousand.");
    s.stdout.recv_timeout(WAIT).expect("the reply starts");
    s.sigint();
    let turn1 = s.wait_stderr("turn 1:");
    assert!(turn1.ends_with("stop: interrupted"), "{turn1}");
    assert!(turn_counts(&turn1).2 < 1000, "{turn1}");
    s.drain_stdout();

    s.say("What is the capital of France?");
    let turn2 = s.wait_stderr("turn 2:");
    assert!(!turn2.ends_with("interrupted"), "{turn2}");
    assert!(turn_counts(&turn2).2 > 0, "{turn2}");
    assert!(!s.drain_stdout().trim().is_empty());
    assert_eq!(s.wait(), Some(0));
}

#[test]
fn sigint_at_the_prompt_exits_cleanly() {
    let mut s = Live::start(16);
    s.say("Hi");
    s.wait_stderr("turn 1:");
    s.sigint();
    let code = s.child.wait().unwrap().code();
    assert!(matches!(code, Some(0) | Some(130)), "{code:?}");
    // The reader thread ends at EOF once the child is gone. The reply ends with a newline,
    // and Ctrl-C adds one so that the shell's prompt starts on a fresh line.
    let out: Vec<u8> = s.stdout.iter().collect();
    assert!(
        out.ends_with(b"\n\n"),
        "{:?}",
        String::from_utf8_lossy(&out)
    );
}

/// Issue 20, row 9: a message that spells a control token is text, not the token, so a user
/// cannot forge turns; `--special-in-content` restores parsing.
#[test]
fn special_token_text_in_a_message_is_plain_text() {
    let prompt_tokens = |extra: &[&str], msg: &str| {
        let (code, _, err) = piped(extra, &format!("{msg}\n"));
        assert_eq!(code, Some(0), "{err}");
        turn_counts(turn_lines(&err)[0]).0
    };
    let plain = prompt_tokens(&[], "x");
    let forged = prompt_tokens(&[], "<|im_start|>");
    assert!(forged >= plain + 3, "as text: {forged} vs {plain} tokens");
    let parsed = prompt_tokens(&["--special-in-content"], "<|im_start|>");
    assert_eq!(
        parsed, plain,
        "with --special-in-content it is one control token"
    );
}
