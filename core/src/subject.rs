//! Subjects and wildcards, validated once at start-up.
//!
//! A NATS subject is a string of `.`-separated tokens (see the NATS docs, "Subject-Based
//! Messaging"). [`Subject`] is a literal subject: something a message can be published to.
//! [`Wildcard`] may also contain the wildcard tokens `*` (exactly one token) and `>` (one or more
//! trailing tokens); it is what a subscription or a `CoreWildcard` mount listens on.
//!
//! The rules enforced here are SETTLEMENT.md rule 11: no empty subject, no empty token, no
//! whitespace or control character anywhere; a literal subject contains no `*` or `>` at all;
//! in a wildcard, `*` and `>` stand only as whole tokens and `>` only as the last one.

use std::fmt;
use std::sync::Arc;

/// Why a subject or wildcard was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SubjectError {
    /// The subject is the empty string.
    #[error("subject is empty")]
    Empty,
    /// A token is empty: the subject starts or ends with `.`, or has `..`.
    #[error("subject `{0}` has an empty token")]
    EmptyToken(String),
    /// The subject contains whitespace or an ASCII/Unicode control character.
    #[error("subject `{0}` contains whitespace or a control character")]
    Whitespace(String),
    /// A literal subject contains `*` or `>`.
    #[error("subject `{0}` contains a wildcard (`*` or `>`) where a literal subject is required")]
    NotLiteral(String),
    /// In a wildcard, `*` or `>` is part of a longer token, or `>` is not the last token.
    #[error("wildcard `{0}` uses `*` or `>` other than as a whole token (and `>` only last)")]
    MisplacedWildcard(String),
}

/// Checks the rules that literal subjects and wildcards share: non-empty, no empty token, no
/// whitespace or control characters.
fn check_common(s: &str) -> Result<(), SubjectError> {
    if s.is_empty() {
        return Err(SubjectError::Empty);
    }
    if s.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(SubjectError::Whitespace(s.to_owned()));
    }
    if s.split('.').any(str::is_empty) {
        return Err(SubjectError::EmptyToken(s.to_owned()));
    }
    Ok(())
}

/// A validated literal NATS subject: publishable, no wildcards.
///
/// Cloning is cheap (a reference count). Compares and hashes as its string.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Subject(Arc<str>);

impl Subject {
    /// Validates `s` as a literal subject.
    ///
    /// # Errors
    /// [`SubjectError::Empty`], [`SubjectError::Whitespace`], [`SubjectError::EmptyToken`], or
    /// [`SubjectError::NotLiteral`] when `s` contains `*` or `>` anywhere.
    pub fn new(s: &str) -> Result<Self, SubjectError> {
        check_common(s)?;
        if s.contains(['*', '>']) {
            return Err(SubjectError::NotLiteral(s.to_owned()));
        }
        Ok(Self(Arc::from(s)))
    }

    /// The subject as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Subject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for Subject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for Subject {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// A validated subscription subject that may contain the wildcard tokens `*` and `>`.
///
/// A wildcard without wildcard tokens is allowed and matches exactly its own subject.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Wildcard(Arc<str>);

impl Wildcard {
    /// Validates `s` as a subscription subject.
    ///
    /// # Errors
    /// [`SubjectError::Empty`], [`SubjectError::Whitespace`], [`SubjectError::EmptyToken`], or
    /// [`SubjectError::MisplacedWildcard`] when `*`/`>` is part of a longer token or `>` is not
    /// the last token.
    pub fn new(s: &str) -> Result<Self, SubjectError> {
        check_common(s)?;
        let mut tokens = s.split('.').peekable();
        while let Some(token) = tokens.next() {
            let is_last = tokens.peek().is_none();
            let ok = match token {
                "*" => true,
                ">" => is_last,
                t => !t.contains(['*', '>']),
            };
            if !ok {
                return Err(SubjectError::MisplacedWildcard(s.to_owned()));
            }
        }
        Ok(Self(Arc::from(s)))
    }

    /// The wildcard as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether the wildcard contains no `*` or `>` token (it matches only itself).
    pub fn is_literal(&self) -> bool {
        !self.0.split('.').any(|t| t == "*" || t == ">")
    }

    /// Whether a message published to `subject` is delivered to a subscription on this
    /// wildcard, by NATS matching rules: `*` matches exactly one token, `>` one or more
    /// trailing tokens, any other token only itself.
    pub fn matches(&self, subject: &Subject) -> bool {
        let mut pattern = self.0.split('.');
        let mut tokens = subject.as_str().split('.');
        loop {
            match (pattern.next(), tokens.next()) {
                (Some(">"), Some(_)) => return true,
                (Some("*"), Some(_)) => {}
                (Some(p), Some(t)) if p == t => {}
                (None, None) => return true,
                _ => return false,
            }
        }
    }
}

impl Wildcard {
    /// Whether every subject `other` matches is matched by this wildcard too: what a stream
    /// whose subjects include this one needs, to store everything published to `other`. A
    /// `>` covers one or more trailing tokens of any kind, `*` one token that is `*` or
    /// literal, a literal token only itself.
    pub fn covers(&self, other: &Wildcard) -> bool {
        let mut pattern = self.0.split('.');
        let mut tokens = other.0.split('.');
        loop {
            match (pattern.next(), tokens.next()) {
                (Some(">"), Some(_)) => return true,
                (Some("*"), Some(t)) if t != ">" => {}
                (Some(p), Some(t)) if p == t && p != "*" && p != ">" => {}
                (None, None) => return true,
                _ => return false,
            }
        }
    }
}

impl Wildcard {
    /// Whether some subject is matched by both wildcards: a subscription on one would receive
    /// a message a stream on the other stores (nats-server's `SubjectsCollide`). Token by
    /// token: `>` overlaps one or more remaining tokens of any kind, `*` any one token, a
    /// literal token an equal one or `*`.
    pub fn overlaps(&self, other: &Wildcard) -> bool {
        let mut a = self.0.split('.');
        let mut b = other.0.split('.');
        loop {
            match (a.next(), b.next()) {
                (Some(">"), Some(_)) | (Some(_), Some(">")) => return true,
                (None, None) => return true,
                (Some(x), Some(y)) if x == "*" || y == "*" || x == y => {}
                _ => return false,
            }
        }
    }
}

impl fmt::Debug for Wildcard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for Wildcard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(x: &str) -> Subject {
        Subject::new(x).expect("valid subject")
    }

    #[test]
    fn overlaps_when_one_subject_matches_both() {
        let w = |x: &str| Wildcard::new(x).expect("valid wildcard");
        for (a, b, overlap) in [
            ("orders.*", "orders.new", true),
            ("orders.>", "*.new.x", true),
            ("a.b", "a.b", true),
            ("*", ">", true),
            ("payments.status", "payments.*", true),
            ("orders.*", "orders.new.x", false),
            ("a.b", "a.c", false),
            ("a", "a.>", false),
        ] {
            assert_eq!(w(a).overlaps(&w(b)), overlap, "{a} {b}");
            assert_eq!(w(b).overlaps(&w(a)), overlap, "{b} {a}");
        }
    }

    #[test]
    fn covers_by_token() {
        let w = |x: &str| Wildcard::new(x).expect("valid wildcard");
        for (pattern, other, covered) in [
            (">", "orders.>", true),
            (">", "a", true),
            ("orders.>", "orders.>", true),
            ("orders.>", "orders.*.new", true),
            ("orders.>", "orders", false),
            ("orders.*", "orders.new", true),
            ("orders.*", "orders.*", true),
            ("orders.*", "orders.>", false),
            ("orders.*", "orders.a.b", false),
            ("orders.new", "orders.new", true),
            ("orders.new", "orders.*", false),
            ("orders.new", "orders.new.x", false),
            ("orders.new.x", "orders.new", false),
        ] {
            assert_eq!(
                w(pattern).covers(&w(other)),
                covered,
                "{pattern} covers {other}"
            );
        }
    }

    #[test]
    fn literal_subjects() {
        assert_eq!(s("orders.new").as_str(), "orders.new");
        assert_eq!(s("a").to_string(), "a");
        assert_eq!(Subject::new(""), Err(SubjectError::Empty));
        for bad in [".a", "a.", "a..b", "."] {
            assert!(
                matches!(Subject::new(bad), Err(SubjectError::EmptyToken(_))),
                "{bad}"
            );
        }
        for bad in ["a b", "a\tb", "a\nb", "a\u{7f}", "a\u{85}b", " a"] {
            assert!(
                matches!(Subject::new(bad), Err(SubjectError::Whitespace(_))),
                "{bad:?}"
            );
        }
        for bad in ["a.*", "a.>", "a*", "x>y", "*"] {
            assert!(
                matches!(Subject::new(bad), Err(SubjectError::NotLiteral(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn wildcards() {
        for ok in ["a.*", "a.>", "*", ">", "*.b.>", "a.b"] {
            assert!(Wildcard::new(ok).is_ok(), "{ok}");
        }
        for bad in ["a.>.b", "a*", "a.b*", "x>", ">.a"] {
            assert!(
                matches!(Wildcard::new(bad), Err(SubjectError::MisplacedWildcard(_))),
                "{bad}"
            );
        }
        assert!(matches!(
            Wildcard::new("a..*"),
            Err(SubjectError::EmptyToken(_))
        ));
        assert!(Wildcard::new("a.b").expect("valid").is_literal());
        assert!(!Wildcard::new("a.*").expect("valid").is_literal());
    }

    #[test]
    fn matching_follows_nats_rules() {
        let w = |x: &str| Wildcard::new(x).expect("valid wildcard");
        assert!(w("orders.*").matches(&s("orders.new")));
        assert!(!w("orders.*").matches(&s("orders")));
        assert!(!w("orders.*").matches(&s("orders.new.eu")));
        assert!(w("orders.>").matches(&s("orders.new.eu")));
        assert!(!w("orders.>").matches(&s("orders")));
        assert!(w(">").matches(&s("anything.at.all")));
        assert!(w("*.new").matches(&s("orders.new")));
        assert!(!w("*.new").matches(&s("orders.old")));
        assert!(w("a.b").matches(&s("a.b")));
        assert!(!w("a.b").matches(&s("a.bc")));
    }
}
