//! `ferrolm chat`: an interactive conversation that keeps the KV cache between turns.
//!
//! Each turn renders the whole conversation with the chat template, keeps the cached prefix
//! that the new rendering shares with what the session holds, and evaluates only the rest.
//! Templates render earlier turns identically, so a turn costs about its own new tokens.

use super::common::ModelOpts;
use super::run::SamplingOpts;
use anyhow::{bail, Result};
use clap::Args;
use ferrolm_engine::{generate, GenerateParams, GenerateStats, Sampler, Session, StopReason};
use ferrolm_gguf::GgufFile;
use ferrolm_tokenizer::{ChatTemplate, Message, Tokenizer};
use std::io::{BufRead, IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::Arc;

#[derive(Args, Debug)]
#[command(after_help = "\
Reads one message per line from stdin (a pipe works too) and streams each reply to stdout. \
Commands: /exit (or /quit, or end of input) quits, /reset starts a new conversation.

Ctrl-C during a reply stops that reply (once the prompt is read) and returns to the prompt; \
the part already shown stays in the conversation. Ctrl-C at the prompt quits.

When the conversation no longer fits the context (-c), that message fails with an error and \
is dropped, and the chat goes on: /reset to start over, or restart with a larger -c. A reply \
that reaches the end of the context is cut short.")]
pub struct ChatArgs {
    #[command(flatten)]
    pub model: ModelOpts,
    #[command(flatten)]
    pub sampling: SamplingOpts,
    /// A system message that opens the conversation (else the template's default, if any).
    #[arg(long)]
    pub system: Option<String>,
    /// Parse special-token text (`<|im_start|>`) typed in a message as control tokens
    /// (default: messages are plain text).
    #[arg(long = "special-in-content")]
    pub special_in_content: bool,
    /// After each reply, print a line of token counts and speeds to stderr.
    #[arg(short = 'v', long)]
    pub verbose: bool,
}

/// What the main loop waits for: a line from the stdin thread, or Ctrl-C while idle.
enum Input {
    Line(String),
    Eof,
    Interrupt,
}

pub fn run(args: ChatArgs) -> Result<()> {
    args.sampling.validate()?;
    let path = args.model.prepare()?;
    let file = GgufFile::open(&path)?;
    let model = args.model.load(&file)?;
    let tok = Tokenizer::from_gguf(&file)?;
    let template = ChatTemplate::from_gguf(&file, &tok)?;
    let session = args.model.session(&model)?;

    let (tx, rx) = mpsc::channel();
    let generating = Arc::new(AtomicBool::new(false));
    let cancel = Arc::new(AtomicBool::new(false));
    install_ctrlc(tx.clone(), generating.clone(), cancel.clone())?;
    spawn_stdin_reader(tx);

    let interactive = std::io::stdin().is_terminal();
    if interactive {
        eprintln!("/exit or Ctrl-D quits, /reset starts over, Ctrl-C stops a reply.");
    }
    let mut chat = Chat {
        tok: &tok,
        template,
        session,
        sampler: args.sampling.sampler(),
        params: GenerateParams {
            cancel: Some(cancel.clone()),
            ..args.sampling.params(&tok, model.cfg.n_vocab)?
        },
        generating,
        cancel,
        verbose: args.verbose,
        special_in_content: args.special_in_content,
        n_turn: 0,
    };
    let opening: Vec<Message> = args
        .system
        .iter()
        .map(|s| Message::new("system", s.as_str()))
        .collect();
    let mut messages = opening.clone();
    loop {
        if interactive {
            print!("> ");
            std::io::stdout().flush()?;
        }
        let line = match rx.recv() {
            Ok(Input::Line(line)) => line,
            Ok(Input::Eof) | Err(_) => {
                if interactive {
                    println!();
                }
                return Ok(());
            }
            Ok(Input::Interrupt) => {
                // The shell's prompt then starts on a line of its own, after the echoed ^C.
                println!();
                return Ok(());
            }
        };
        match line.trim() {
            "" => continue,
            "/exit" | "/quit" => return Ok(()),
            "/reset" => {
                // The session keeps its cache: the next turn reuses whatever prefix still
                // matches (the system message, at least).
                messages = opening.clone();
                eprintln!("(new conversation)");
                continue;
            }
            _ => {}
        }
        messages.push(Message::new("user", line));
        match chat.turn(&messages) {
            Ok(reply) => messages.push(Message::new("assistant", reply)),
            Err(e) => {
                messages.pop();
                eprintln!("error: {e:#}");
            }
        }
    }
}

/// Everything a turn needs, besides the conversation.
struct Chat<'t, 'm, 'a> {
    tok: &'t Tokenizer,
    template: ChatTemplate,
    session: Session<'m, 'a>,
    sampler: Sampler,
    params: GenerateParams,
    generating: Arc<AtomicBool>,
    /// The flag in `params.cancel`.
    cancel: Arc<AtomicBool>,
    verbose: bool,
    special_in_content: bool,
    n_turn: usize,
}

impl Chat<'_, '_, '_> {
    /// Generates the assistant's reply to `messages`, streaming it to stdout, and returns it.
    fn turn(&mut self, messages: &[Message]) -> Result<String> {
        let ids = self
            .template
            .encode(self.tok, messages, true, self.special_in_content)?;
        let n_ctx = self.session.n_ctx();
        if ids.len() >= n_ctx {
            bail!(
                "the conversation is {} tokens and the context holds {n_ctx}, leaving no room \
                 for a reply; this message was dropped (/reset starts over, -c raises the context)",
                ids.len()
            );
        }
        let cached = self.session.reuse_prefix(&ids);
        self.cancel.store(false, Ordering::SeqCst);
        self.generating.store(true, Ordering::SeqCst);
        let mut reply = String::new();
        let mut stdout = std::io::stdout().lock();
        let result = generate(
            &mut self.session,
            &mut self.sampler,
            self.tok,
            &ids[cached..],
            &self.params,
            |piece| {
                reply.push_str(piece);
                let _ = stdout.write_all(piece.as_bytes());
                let _ = stdout.flush();
            },
        );
        self.generating.store(false, Ordering::SeqCst);
        let stats = result?;
        writeln!(stdout)?;
        stdout.flush()?;
        self.n_turn += 1;
        if stats.stop == StopReason::ContextFull {
            eprintln!("(the context is full: reply cut short; /reset starts over)");
        }
        if self.verbose {
            eprintln!("{}", stats_line(self.n_turn, cached, &stats));
        }
        Ok(reply)
    }
}

fn stats_line(n_turn: usize, cached: usize, s: &GenerateStats) -> String {
    let stop = match s.stop {
        StopReason::Eog => "end of turn",
        StopReason::StopString => "stop string",
        StopReason::Length => "length",
        StopReason::ContextFull => "context full",
        StopReason::Cancelled => "interrupted",
    };
    format!(
        "turn {n_turn}: prompt {} new tokens ({cached} cached), {:.2} t/s | generation {} tokens, \
         {:.2} t/s | stop: {stop}",
        s.n_prompt,
        s.prompt_tps(),
        s.n_gen,
        s.gen_tps()
    )
}

/// Ctrl-C during generation sets `cancel`, which `generate` checks per token; anywhere else
/// it wakes the main loop to quit. Without raw mode there is no terminal state to restore.
fn install_ctrlc(
    tx: Sender<Input>,
    generating: Arc<AtomicBool>,
    cancel: Arc<AtomicBool>,
) -> Result<()> {
    ctrlc::set_handler(move || {
        if generating.load(Ordering::SeqCst) {
            cancel.store(true, Ordering::SeqCst);
        } else {
            let _ = tx.send(Input::Interrupt);
        }
    })?;
    Ok(())
}

/// Reads stdin on its own thread, so the main loop can wait on lines and Ctrl-C at once
/// (a blocking read is not interrupted: the handler's SA_RESTART resumes it).
fn spawn_stdin_reader(tx: Sender<Input>) {
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin().lock();
        loop {
            let mut buf = Vec::new();
            match stdin.read_until(b'\n', &mut buf) {
                Ok(0) | Err(_) => {
                    let _ = tx.send(Input::Eof);
                    return;
                }
                Ok(_) => {
                    let text = String::from_utf8_lossy(&buf);
                    let line = text.trim_end_matches(['\n', '\r']).to_owned();
                    if tx.send(Input::Line(line)).is_err() {
                        return;
                    }
                }
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Cache reuse rests on this: the rendering of a turn starts with the previous turn's
    /// prompt followed by the reply.
    #[test]
    fn chatml_renders_earlier_turns_as_a_prefix() {
        let t = ChatTemplate::chatml();
        let mut m = vec![
            Message::new("system", "Be brief."),
            Message::new("user", "Hi"),
        ];
        let first = t.render(&m, true).unwrap();
        m.push(Message::new("assistant", "Hello!"));
        m.push(Message::new("user", "Bye"));
        let second = t.render(&m, true).unwrap();
        assert!(second.starts_with(&format!("{first}Hello!")), "{second}");
    }

    #[test]
    fn stats_line_names_the_counts() {
        let s = GenerateStats {
            n_prompt: 7,
            n_gen: 3,
            prompt_secs: 0.5,
            gen_secs: 1.0,
            stop: StopReason::Cancelled,
            tokens: vec![1, 2, 3],
            mask_secs: 0.0,
            mask_wait_secs: 0.0,
        };
        assert_eq!(
            stats_line(2, 40, &s),
            "turn 2: prompt 7 new tokens (40 cached), 14.00 t/s | generation 3 tokens, \
             3.00 t/s | stop: interrupted"
        );
    }
}
