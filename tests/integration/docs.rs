//! The documentation's commands are real: every `widebag` command line in a fenced code block of
//! README.md or docs/*.md parses (clap checks each subcommand, flag and value before a final
//! `--help` stops the run), and README.md stays a five-minute read.

use std::path::PathBuf;

use crate::common::{repo_relative, repo_root, widebag};

/// README.md is the five-minute introduction; the detail lives in the guides under `docs/`.
const README_MAX_LINES: usize = 160;

/// Fewer command lines than this means the extraction broke, not that the documents are clean.
const MIN_COMMANDS: usize = 20;

/// A command line of a document: where it starts, its text, and the arguments after the program.
#[derive(Debug)]
struct DocCommand {
    file: String,
    line: usize,
    text: String,
    args: Vec<String>,
}

/// README.md, then every `docs/*.md` in name order.
fn documents() -> Vec<PathBuf> {
    let mut guides: Vec<PathBuf> = std::fs::read_dir(repo_root().join("docs"))
        .expect("reads docs/")
        .map(|e| e.expect("reads a directory entry").path())
        .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "md"))
        .collect();
    guides.sort();
    let mut documents = vec![repo_root().join("README.md")];
    documents.extend(guides);
    documents
}

/// Where a command line's words end.
#[derive(Debug, PartialEq)]
enum End {
    /// At the end of the line, or where its comment starts.
    Line,
    /// At an unquoted shell operator: `|`, `>`, `<`, `&` or `;` (a pipe, a redirection, `&&`).
    Operator(char),
}

/// Splits `line` into words as a POSIX shell does for a simple command: single quotes keep
/// everything literal, double quotes everything but `\"`, `\\`, `\$` and `` \` ``, a backslash
/// outside quotes escapes the next character, and an unquoted `#` at a word's start begins a
/// comment. The words stop at the first unquoted operator; a digits-only word right before a
/// redirection (the `2` of `2>&1`) is its file descriptor and is dropped.
fn shell_words(line: &str) -> Result<(Vec<String>, End), String> {
    let mut words = Vec::new();
    let mut word = String::new();
    // A word has started (quotes can make an empty one), and whether part of it was quoted.
    let mut in_word = false;
    let mut quoted = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                quoted = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => word.push(c),
                        None => return Err("an unterminated single quote".into()),
                    }
                }
            }
            '"' => {
                in_word = true;
                quoted = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c @ ('"' | '\\' | '$' | '`')) => word.push(c),
                            Some(c) => {
                                word.push('\\');
                                word.push(c);
                            }
                            None => return Err("an unterminated double quote".into()),
                        },
                        Some(c) => word.push(c),
                        None => return Err("an unterminated double quote".into()),
                    }
                }
            }
            '\\' => {
                in_word = true;
                if let Some(c) = chars.next() {
                    word.push(c);
                }
            }
            '#' if !in_word => break,
            '|' | '>' | '<' | '&' | ';' => {
                let fd = in_word
                    && !quoted
                    && matches!(c, '>' | '<')
                    && word.chars().all(|d| d.is_ascii_digit());
                if in_word && !fd {
                    words.push(word);
                }
                return Ok((words, End::Operator(c)));
            }
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                    quoted = false;
                }
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    Ok((words, End::Line))
}

/// The arguments after the program when `words` run widebag: `widebag …` (or a path to it),
/// `cargo run --release -- …`, or `mpirun [its options] …/widebag …`, after any leading
/// `NAME=value` environment assignments; `None` for any other command.
fn widebag_args(words: &[String]) -> Option<Vec<String>> {
    let assignment = |w: &str| {
        w.split_once('=').is_some_and(|(name, _)| {
            name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        })
    };
    let words: Vec<&str> = words
        .iter()
        .map(String::as_str)
        .skip_while(|w| assignment(w))
        .collect();
    let is_widebag = |w: &str| w == "widebag" || w.ends_with("/widebag");
    let rest = match words.as_slice() {
        [first, rest @ ..] if is_widebag(first) => rest,
        ["cargo", "run", "--release", "--", rest @ ..] => rest,
        ["mpirun", rest @ ..] => {
            let at = rest.iter().position(|w| is_widebag(w))?;
            &rest[at + 1..]
        }
        _ => return None,
    };
    Some(rest.iter().map(|w| (*w).to_string()).collect())
}

/// The lines of `text`'s fenced code blocks, each with the number of its first line: a line
/// ending in `\` is joined with the next, as the shell joins them.
fn fenced_lines(text: &str) -> Vec<(usize, String)> {
    let mut lines = Vec::new();
    let mut in_fence = false;
    let mut pending: Option<(usize, String)> = None;
    for (i, raw) in text.lines().enumerate() {
        if raw.trim_start().starts_with("```") {
            in_fence = !in_fence;
            pending = None;
            continue;
        }
        if !in_fence {
            continue;
        }
        let (start, mut joined) = pending.take().unwrap_or((i + 1, String::new()));
        let body = raw.trim_end();
        if let Some(head) = body.strip_suffix('\\') {
            joined.push_str(head);
            joined.push(' ');
            pending = Some((start, joined));
        } else {
            joined.push_str(body);
            lines.push((start, joined));
        }
    }
    lines
}

/// The widebag command lines of document `file` (its text `text`), and a problem for each line
/// that starts like one but does not split into words.
fn doc_commands(file: &str, text: &str) -> (Vec<DocCommand>, Vec<String>) {
    let mut commands = Vec::new();
    let mut problems = Vec::new();
    for (line, joined) in fenced_lines(text) {
        let trimmed = joined.trim();
        let command = trimmed.strip_prefix("$ ").unwrap_or(trimmed);
        if !command.contains("widebag") && !command.contains("cargo run") {
            continue;
        }
        let (words, end) = match shell_words(command) {
            Ok(split) => split,
            Err(why) => {
                let rough: Vec<String> = command.split_whitespace().map(String::from).collect();
                if widebag_args(&rough).is_some() {
                    problems.push(format!("{file}:{line}: `{command}` has {why}"));
                }
                continue;
            }
        };
        // `<` and `…` mark placeholders (`<FILE>`, `a … b`), not arguments.
        if end == End::Operator('<') {
            continue;
        }
        let Some(args) = widebag_args(&words) else {
            continue;
        };
        if args.iter().any(|a| a.contains('<') || a.contains('…')) {
            continue;
        }
        commands.push(DocCommand {
            file: file.to_string(),
            line,
            text: command.to_string(),
            args,
        });
    }
    (commands, problems)
}

#[test]
fn every_documented_command_line_parses() {
    let mut commands = Vec::new();
    let mut problems = Vec::new();
    for path in documents() {
        let text = std::fs::read_to_string(&path).expect("reads a document");
        let (found, bad) = doc_commands(&repo_relative(&path), &text);
        commands.extend(found);
        problems.extend(bad);
    }
    assert!(
        commands.len() >= MIN_COMMANDS,
        "found only {} widebag command lines in README.md and docs/*.md (at least {MIN_COMMANDS} \
         expected): {commands:?}",
        commands.len()
    );
    for c in &commands {
        let mut args: Vec<&str> = c.args.iter().map(String::as_str).collect();
        args.push("--help");
        let out = widebag(&args);
        if !out.status.success() {
            problems.push(format!(
                "{}:{}: `{}` does not parse ({}): {}",
                c.file,
                c.line,
                c.text,
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "{} of the {} documented widebag command lines are wrong:\n{}",
        problems.len(),
        commands.len(),
        problems.join("\n")
    );
}

#[test]
fn the_readme_is_a_five_minute_read() {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).expect("reads README.md");
    let lines = readme.lines().count();
    assert!(
        lines <= README_MAX_LINES,
        "README.md has {lines} lines, more than {README_MAX_LINES}: move the detail into a guide \
         under docs/"
    );
    // The front page says what widebag does, not its history: no commit hashes or issue
    // numbers (they belong in docs/ beside the figures they date).
    let mut history = Vec::new();
    for (i, line) in readme.lines().enumerate() {
        let words = line.split(|c: char| !c.is_ascii_alphanumeric() && c != '#');
        let mut prev = "";
        for w in words {
            let hash = w.len() >= 7
                && w.chars().all(|c| c.is_ascii_hexdigit())
                && w.chars().any(|c| c.is_ascii_alphabetic())
                && w.chars().any(|c| c.is_ascii_digit());
            let issue = (prev.eq_ignore_ascii_case("issue")
                && w.chars().all(|c| c.is_ascii_digit())
                && !w.is_empty())
                || (w.starts_with('#')
                    && w.len() > 1
                    && w[1..].chars().all(|c| c.is_ascii_digit()));
            if hash || issue {
                history.push(format!("README.md:{}: {w}", i + 1));
            }
            if !w.is_empty() {
                prev = w;
            }
        }
    }
    assert!(
        history.is_empty(),
        "commit hashes or issue numbers on the front page: {history:?}"
    );
}

#[test]
fn shell_words_split_as_the_shell_does() {
    let (words, end) =
        shell_words(r#"widebag train --set 'a="b c"' --set "x=[1, \"2\"]" a\ b  # a note"#)
            .expect("splits");
    assert_eq!(
        words,
        [
            "widebag",
            "train",
            "--set",
            "a=\"b c\"",
            "--set",
            "x=[1, \"2\"]",
            "a b"
        ]
    );
    assert_eq!(end, End::Line);
    let (words, end) = shell_words("widebag plan --json 2>&1 | jq .").expect("splits");
    assert_eq!(words, ["widebag", "plan", "--json"]);
    assert_eq!(end, End::Operator('>'));
    let (words, end) = shell_words("widebag eval runs/x && echo 'a|b'").expect("splits");
    assert_eq!(words, ["widebag", "eval", "runs/x"]);
    assert_eq!(end, End::Operator('&'));
    assert!(shell_words("widebag train --set 'a=b").is_err());
    assert!(shell_words("widebag train --set \"a=b").is_err());
}

#[test]
fn command_lines_are_found_in_fenced_blocks_only() {
    let text = "\
widebag train --not-in-a-fence

```sh
$ widebag plan --budget 8GiB   # a comment
FOO=1 cargo run --release -- train \\
  --set train.steps=20
mpirun --oversubscribe -np 2 target/release/widebag train --device cpu
cargo build --release --features mpi
widebag data stats <FILE>
widebag eval runs/x … more
echo widebag
```

```python
x = \"widebag 'unbalanced\"
```
";
    let (commands, problems) = doc_commands("t.md", text);
    assert!(problems.is_empty(), "{problems:?}");
    let found: Vec<(usize, Vec<&str>)> = commands
        .iter()
        .map(|c| (c.line, c.args.iter().map(String::as_str).collect()))
        .collect();
    assert_eq!(
        found,
        [
            (4, vec!["plan", "--budget", "8GiB"]),
            (5, vec!["train", "--set", "train.steps=20"]),
            (7, vec!["train", "--device", "cpu"]),
        ]
    );
    let (commands, problems) = doc_commands("t.md", "```\nwidebag train --set 'a=b\n```\n");
    assert!(commands.is_empty(), "{commands:?}");
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].starts_with("t.md:2: `widebag train"),
        "{problems:?}"
    );
}
