//! The failed tests' own messages, gathered from `cargo test`'s output so
//! `cargo xtask test` can repeat them last. A CI log is often read by its
//! head and tail only; libtest prints the messages in the middle, each
//! followed by a backtrace, and only the names at the end.

/// Lines kept of one test's message, and characters of one line.
const MESSAGE_LINES: usize = 30;
const LINE_CHARS: usize = 400;
/// Tests whose messages are kept: beyond that the names say enough.
const TESTS: usize = 20;

/// One failed test: its name and the start of its panic message (or, with
/// no panic found, the last lines it printed).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Failure {
    pub name: String,
    pub message: Vec<String>,
}

/// Reads libtest's output line by line and keeps what each failure section
/// (`---- NAME stdout ----`) says, bounded.
#[derive(Debug, Default)]
pub(crate) struct Collector {
    failures: Vec<Failure>,
    /// The section being read: whether its panic line was seen, whether
    /// its message has ended (a backtrace or a note began), its last lines.
    open: Option<Section>,
}

#[derive(Debug)]
struct Section {
    name: String,
    panicked: bool,
    ended: bool,
    lines: std::collections::VecDeque<String>,
}

impl Collector {
    pub(crate) fn line(&mut self, line: &str) {
        if let Some(name) = line
            .strip_prefix("---- ")
            .and_then(|l| l.strip_suffix(" stdout ----"))
        {
            self.close();
            self.open = (self.failures.len() < TESTS).then(|| Section {
                name: name.to_string(),
                panicked: false,
                ended: false,
                lines: Default::default(),
            });
            return;
        }
        // The list of names after the sections, or the next binary's run.
        let running =
            line.starts_with("running ") && (line.ends_with(" tests") || line.ends_with(" test"));
        if line == "failures:" || line.starts_with("test result:") || running {
            self.close();
            return;
        }
        let Some(s) = self.open.as_mut() else {
            return;
        };
        if s.ended {
            return;
        }
        if !s.panicked && line.contains("panicked at ") {
            s.panicked = true;
            s.lines.clear();
        } else if s.panicked && (line.starts_with("stack backtrace:") || line.starts_with("note: "))
        {
            s.ended = true;
            return;
        }
        let cut: String = line.chars().take(LINE_CHARS).collect();
        s.lines.push_back(cut);
        if s.lines.len() > MESSAGE_LINES {
            if s.panicked {
                s.ended = true;
                s.lines.pop_back();
            } else {
                s.lines.pop_front();
            }
        }
    }

    fn close(&mut self) {
        if let Some(s) = self.open.take() {
            self.failures.push(Failure {
                name: s.name,
                message: s.lines.into(),
            });
        }
    }

    pub(crate) fn finish(mut self) -> Vec<Failure> {
        self.close();
        self.failures
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(text: &str) -> Vec<Failure> {
        let mut c = Collector::default();
        text.lines().for_each(|l| c.line(l));
        c.finish()
    }

    #[test]
    fn keeps_each_panic_message_without_its_backtrace() {
        let out = "\
running 2 tests
test a ... FAILED
test b ... FAILED

failures:

---- suite::a stdout ----
noise printed by the test
thread 'suite::a' panicked at tests/a.rs:3:5:
assertion failed: x
second line
stack backtrace:
   0: frame
---- suite::b stdout ----
only output
more output

failures:
    suite::a
    suite::b

test result: FAILED. 0 passed; 2 failed
";
        assert_eq!(
            collect(out),
            vec![
                Failure {
                    name: "suite::a".into(),
                    message: vec![
                        "thread 'suite::a' panicked at tests/a.rs:3:5:".into(),
                        "assertion failed: x".into(),
                        "second line".into(),
                    ],
                },
                Failure {
                    name: "suite::b".into(),
                    message: vec!["only output".into(), "more output".into(), "".into()],
                },
            ]
        );
    }

    #[test]
    fn long_messages_and_lines_are_cut() {
        let mut out = String::from("---- t stdout ----\nthread 't' panicked at x:\n");
        for i in 0..100 {
            out.push_str(&format!("{i} {}\n", "y".repeat(1000)));
        }
        let f = collect(&out);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].message.len(), MESSAGE_LINES);
        assert!(f[0].message.iter().all(|l| l.chars().count() <= LINE_CHARS));
        assert!(f[0].message[1].starts_with("0 "));
    }
}
