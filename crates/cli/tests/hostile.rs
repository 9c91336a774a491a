//! Hostile files and careless flags through the binary (issue 20): each must end in one line
//! on stderr and exit code 2, quickly, without a panic, an abort or runaway memory.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn golden(name: &str) -> String {
    format!(
        "{}/../../../shared/golden/{name}",
        env!("CARGO_MANIFEST_DIR")
    )
}

/// Runs the binary with a deadline (a hang is a failure, not a stuck test run).
fn ferrolm(args: &[&str]) -> (i32, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ferrolm"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
            return (status.code().unwrap_or(-1), err);
        }
        if t0.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("ferrolm {args:?} still running after 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Exit code 2 and one line on stderr that mentions `want`.
fn refused(args: &[&str], want: &str) {
    let (code, err) = ferrolm(args);
    assert_eq!(code, 2, "ferrolm {args:?}: exit {code}, stderr:\n{err}");
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| !l.starts_with("ferrolm: "))
        .collect();
    assert_eq!(lines.len(), 1, "ferrolm {args:?}: not one line:\n{err}");
    assert!(
        lines[0].contains(want),
        "ferrolm {args:?}: {:?} does not mention {want:?}",
        lines[0]
    );
}

/// `ferrolm logits` of three tokens on `path` (CPU) is refused as [`refused`] says.
fn logits_refused(path: &str, want: &str) {
    let args = [
        "logits",
        "-m",
        path,
        "--tokens",
        "1 2 3",
        "--backend",
        "cpu",
    ];
    refused(&args, want);
}

#[test]
fn an_empty_prompt_is_refused_not_a_panic() {
    refused(&["run", "-p", "", "-n", "5", "-t", "2"], "prompt is empty");
    refused(
        &["run", "-f", "/dev/null", "-n", "5", "-t", "2"],
        "prompt is empty",
    );
}

#[test]
fn a_huge_context_is_checked_against_memory_first() {
    let huge = ["-c", "100000000", "-t", "2", "--backend", "cpu"];
    let mut run = vec!["run", "-p", "Hello", "-n", "1"];
    run.extend(huge);
    refused(&run, "would fit");
    let model = golden("tiny-llama-q8_0.gguf");
    let mut logits = vec!["logits", "-m", &model, "--tokens", "1 2 3"];
    logits.extend(huge);
    refused(&logits, "would fit");
    let mut serve = vec!["serve", "--port", "0"];
    serve.extend(huge);
    refused(&serve, "would fit");
}

#[test]
fn serve_parallel_is_bounded_by_memory() {
    refused(
        &[
            "serve",
            "--port",
            "0",
            "--parallel",
            "100000",
            "-t",
            "2",
            "--backend",
            "cpu",
        ],
        "--parallel",
    );
}

/// `path` with the bytes of `patch` applied.
fn patched(dir: &std::path::Path, name: &str, patch: impl FnOnce(&mut Vec<u8>)) -> String {
    let mut bytes = std::fs::read(golden("tiny-llama-q8_0.gguf")).unwrap();
    patch(&mut bytes);
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path.to_str().unwrap().to_owned()
}

fn find(bytes: &[u8], what: &[u8]) -> usize {
    bytes
        .windows(what.len())
        .position(|w| w == what)
        .unwrap_or_else(|| panic!("{:?} not in the file", String::from_utf8_lossy(what)))
}

#[test]
fn a_block_count_past_the_tensors_is_refused_before_allocating() {
    let dir = tempfile::tempdir().unwrap();
    let path = patched(dir.path(), "blocks.gguf", |b| {
        // The key, then its value type (u32 = 4) and the value.
        let at = find(b, b"llama.block_count") + "llama.block_count".len();
        assert_eq!(b[at..at + 4], 4u32.to_le_bytes());
        b[at + 4..at + 8].copy_from_slice(&u32::MAX.to_le_bytes());
    });
    logits_refused(&path, "block_count");
}

#[test]
fn overlapping_tensor_data_is_refused_at_load() {
    let dir = tempfile::tempdir().unwrap();
    let path = patched(dir.path(), "overlap.gguf", |b| {
        // Tensor info: name, n_dims (u32), dims (u64 each), type (u32), offset. Q8_0 -> F16
        // makes token_embd's data run into the next tensor's.
        let mut at = find(b, b"token_embd.weight") + "token_embd.weight".len();
        let n_dims = u32::from_le_bytes(b[at..at + 4].try_into().unwrap()) as usize;
        at += 4 + 8 * n_dims;
        assert_eq!(b[at..at + 4], 8u32.to_le_bytes(), "token_embd is Q8_0");
        b[at..at + 4].copy_from_slice(&1u32.to_le_bytes());
    });
    logits_refused(&path, "overlaps");
    refused(&["inspect", &path], "overlaps");
}

#[test]
fn only_regular_files_are_opened_as_models() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo.gguf");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    refused(&["inspect", fifo.to_str().unwrap()], "not a regular file");
    refused(&["inspect", dir.path().to_str().unwrap()], "is a directory");
    refused(&["inspect", "/dev/null"], "not a regular file");
}

#[test]
fn sampling_flags_are_validated_as_the_server_does() {
    let model = golden("tiny-llama-q8_0.gguf");
    let cases: &[(&[&str], &str)] = &[
        (&["--temp=-1"], "--temp"),
        (&["--temp", "-1"], "--temp"),
        (&["--temp", "nan"], "--temp"),
        (&["--top-p", "2"], "--top-p"),
        (&["--min-p=-5"], "--min-p"),
        (&["--min-p", "-5"], "--min-p"),
        (&["--repeat-penalty=-1"], "--repeat-penalty"),
        (&["--stop", ""], "--stop"),
        (&["-t", "100000"], "--threads"),
    ];
    for (flags, want) in cases {
        let mut args = vec!["run", "-m", &model, "-p", "x", "-n", "1"];
        args.extend_from_slice(flags);
        refused(&args, want);
    }
}

#[test]
fn split_flags_that_cannot_run_are_refused() {
    let model = golden("tiny-llama-q8_0.gguf");
    let cases: &[(&[&str], &str)] = &[
        (&["--sm", "row", "--ts", "2,1"], "equal shares"),
        (&["--sm", "row", "--ts", "1,0"], "equal shares above 0"),
        (&["--sm", "layer", "--ts", "1,nan"], "not a share"),
        (
            &["--sm", "row", "--ts", "1,1", "--backend", "cpu"],
            "runs on GPUs",
        ),
        (
            &["--sm", "layer", "--ts", "1,1", "-ngl", "0"],
            "runs on GPUs",
        ),
        (&["--ts", "1,1"], "give --split-mode"),
        // Without a GPU a split has nowhere to go.
        (&["--sm", "row"], "no GPU"),
        (&["--sm", "layer"], "no GPU"),
    ];
    let no_gpu = ferrolm_cuda::CudaDevice::count() == 0;
    for (flags, want) in cases {
        if *want == "no GPU" && !no_gpu {
            continue;
        }
        let mut args = vec!["run", "-m", &model, "-p", "x", "-n", "1"];
        args.extend_from_slice(flags);
        refused(&args, want);
    }
}
