//! nanochat's offline data, generated from committed tables: prose for pretraining and chat
//! conversations for supervised fine-tuning, with a held-out split of every kind that no
//! training conversation contains.
//!
//! Four kinds of question: the capital of a country (`data/capitals.tsv`), the sum of two
//! numbers below 100, a unit conversion, and a few fixed instructions. Held out: every fifth
//! country (France stays in training), one sum in ten, and one count in seven of each
//! conversion. The held-out capitals still appear in the pretraining prose, so answering
//! them measures whether what the model read carries over to the chat format; the held-out
//! sums and conversions appear nowhere.

use std::fmt::Write as _;

/// The country–capital table.
pub const CAPITALS: &str = include_str!("../../data/capitals.tsv");

/// Which part of the data an item belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Split {
    /// Used for training.
    Train,
    /// Never in a training conversation; used by the evaluation.
    HeldOut,
}

/// What a question asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// The capital of a country.
    Capital,
    /// The sum of two numbers.
    Sum,
    /// A unit conversion.
    Conversion,
    /// A fixed instruction.
    Instruction,
}

/// One question with its answer, and the text a correct answer must contain.
#[derive(Debug, Clone, PartialEq)]
pub struct Qa {
    /// The question's kind.
    pub kind: Kind,
    /// The user's message.
    pub question: String,
    /// The assistant's answer.
    pub answer: String,
    /// What a correct answer contains.
    pub expect: String,
    /// Training or held out.
    pub split: Split,
}

/// `(country, capital)` rows of [`CAPITALS`].
pub fn capitals() -> Vec<(&'static str, &'static str)> {
    CAPITALS
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| l.split_once('\t'))
        .collect()
}

fn capital_split(i: usize, country: &str) -> Split {
    if i % 5 == 4 && country != "France" {
        Split::HeldOut
    } else {
        Split::Train
    }
}

fn sum_split(a: u32, b: u32) -> Split {
    if (a * 7 + b * 13) % 10 == 3 {
        Split::HeldOut
    } else {
        Split::Train
    }
}

/// Conversions: `(from, to, factor)`.
pub const CONVERSIONS: [(&str, &str, u32); 6] = [
    ("meters", "centimeters", 100),
    ("kilometers", "meters", 1000),
    ("kilograms", "grams", 1000),
    ("hours", "minutes", 60),
    ("minutes", "seconds", 60),
    ("days", "hours", 24),
];

fn conversion_split(n: u32) -> Split {
    if n % 7 == 3 {
        Split::HeldOut
    } else {
        Split::Train
    }
}

const CAPITAL_QUESTIONS: [&str; 4] = [
    "What is the capital of {c}?",
    "What's the capital city of {c}?",
    "Which city is the capital of {c}?",
    "Name the capital of {c}.",
];

const INSTRUCTIONS: [(&str, &str, &str); 6] = [
    ("Hello!", "Hello! How can I help you?", "Hello"),
    ("Hi", "Hello! How can I help you?", "Hello"),
    ("Who are you?", "I am nanochat, a small language model trained from scratch by fucina-rs.", "nanochat"),
    ("What can you do?", "I can name capitals, add numbers and convert units.", "capitals"),
    ("Thank you!", "You are welcome!", "welcome"),
    ("Say goodbye.", "Goodbye!", "Goodbye"),
];

/// Every question of every kind, both splits, in a fixed order.
pub fn questions() -> Vec<Qa> {
    let mut out = Vec::new();
    for (i, (c, k)) in capitals().into_iter().enumerate() {
        for (j, q) in CAPITAL_QUESTIONS.iter().enumerate() {
            // Held-out countries are asked one way only.
            let split = capital_split(i, c);
            if split == Split::HeldOut && j > 0 {
                continue;
            }
            out.push(Qa {
                kind: Kind::Capital,
                question: q.replace("{c}", c),
                answer: format!("The capital of {c} is {k}."),
                expect: k.to_string(),
                split,
            });
        }
    }
    for a in 0..100u32 {
        for b in 0..100u32 {
            out.push(Qa {
                kind: Kind::Sum,
                question: format!("What is {a} + {b}?"),
                answer: format!("{a} + {b} = {}.", a + b),
                expect: format!("= {}", a + b),
                split: sum_split(a, b),
            });
        }
    }
    for (from, to, f) in CONVERSIONS {
        for n in 1..=60u32 {
            out.push(Qa {
                kind: Kind::Conversion,
                question: format!("How many {to} are in {n} {from}?"),
                answer: format!("{n} {from} is {} {to}.", n * f),
                expect: format!("{} {to}", n * f),
                split: conversion_split(n),
            });
        }
    }
    for (q, a, e) in INSTRUCTIONS {
        out.push(Qa {
            kind: Kind::Instruction,
            question: q.into(),
            answer: a.into(),
            expect: e.into(),
            split: Split::Train,
        });
    }
    out
}

/// Pretraining prose: every capital (both splits) in several phrasings, and the training
/// sums and conversions as sentences; one document per line.
pub fn prose() -> Vec<String> {
    let mut docs = Vec::new();
    for (c, k) in capitals() {
        docs.push(format!("The capital of {c} is {k}. {k} is the capital city of {c}."));
        docs.push(format!("{k} is the capital of {c}. The government of {c} sits in {k}."));
    }
    for a in 0..100u32 {
        let mut s = String::new();
        for b in 0..100u32 {
            if sum_split(a, b) == Split::Train && (a + b) % 3 == 0 {
                let _ = write!(s, "{a} plus {b} is {}. ", a + b);
            }
        }
        docs.push(s.trim_end().to_string());
    }
    for (from, to, f) in CONVERSIONS {
        let mut s = String::new();
        for n in (1..=60u32).filter(|n| conversion_split(*n) == Split::Train) {
            let _ = write!(s, "{n} {from} is {} {to}. ", n * f);
        }
        docs.push(s.trim_end().to_string());
    }
    docs
}

/// The King James Bible as `bible -p DIR "gen1:1-rev22:21"` prints it (the Debian package
/// `bible-kjv`, public domain; `tools/nanochat_corpus.sh`), reduced to one verse per line:
/// chapter headings and verse numbers dropped, wrapped lines joined.
pub fn clean_kjv(raw: &str) -> Vec<String> {
    let mut verses: Vec<String> = Vec::new();
    for line in raw.lines() {
        let t = line.trim();
        if t.is_empty() {
            continue;
        }
        let starts_verse =
            line.starts_with(' ') && t.split_once(' ').is_some_and(|(n, _)| n.bytes().all(|b| b.is_ascii_digit()));
        if starts_verse {
            let (_, text) = t.split_once(' ').unwrap_or(("", t));
            verses.push(text.trim().to_string());
        } else if line.starts_with(' ') || verses.is_empty() || is_heading(t) {
            // A chapter heading ("Genesis 1") or something before the first verse.
            continue;
        } else if let Some(last) = verses.last_mut() {
            last.push(' ');
            last.push_str(t);
        }
    }
    verses
}

fn is_heading(t: &str) -> bool {
    t.rsplit_once(' ').is_some_and(|(book, ch)| !book.is_empty() && ch.bytes().all(|b| b.is_ascii_digit()))
}

/// A splitmix64 stream: the data's only randomness, seeded, so every run and every resume
/// sees the same samples.
#[derive(Debug, Clone)]
pub struct SplitMix(pub u64);

impl SplitMix {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_are_disjoint_and_france_trains() {
        let qs = questions();
        let train: std::collections::HashSet<&str> =
            qs.iter().filter(|q| q.split == Split::Train).map(|q| q.question.as_str()).collect();
        assert!(qs.iter().filter(|q| q.split == Split::HeldOut).all(|q| !train.contains(q.question.as_str())));
        assert!(train.contains("What is the capital of France?"));
        let held = |k| qs.iter().filter(|q| q.kind == k && q.split == Split::HeldOut).count();
        assert_eq!(held(Kind::Capital), 25);
        assert!(
            held(Kind::Sum) == 1000 && held(Kind::Conversion) == 6 * 9,
            "{} {}",
            held(Kind::Sum),
            held(Kind::Conversion)
        );
        // Held-out sums and conversions never appear in the prose either.
        let prose = prose().join("\n");
        for q in qs.iter().filter(|q| q.split == Split::HeldOut && q.kind != Kind::Capital) {
            let (a, _) = q.answer.split_once(" = ").or_else(|| q.answer.split_once(" is ")).unwrap();
            let sentence = q.answer.replace(" + ", " plus ").replace(" = ", " is ");
            assert!(!prose.contains(&sentence), "{a}: `{sentence}` is in the prose");
        }
    }

    #[test]
    fn kjv_verses() {
        let raw = "\nGenesis 1\n\n  1 In the beginning God created the heaven and the earth.\n  2 And the earth was without form, and void; and darkness was upon the face of\nthe deep.\n\nGenesis 2\n\n  1 Thus the heavens\n";
        assert_eq!(
            clean_kjv(raw),
            [
                "In the beginning God created the heaven and the earth.",
                "And the earth was without form, and void; and darkness was upon the face of the deep.",
                "Thus the heavens"
            ]
        );
    }
}
