//! A section of the file read key by key, each with where it is: the
//! manager's `[manager]` and `[tasks."name".policy]`, which hosts keep for
//! `flowctrl manage` without reading. A key the reader does not know, or a
//! value of the wrong type, is refused at the key's own line and column.

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use toml::Spanned;

use super::lines::Lines;
use crate::error::{Error, Result};

/// A section as serde reads it, with its keys' and values' spans.
pub(super) type Raw = Spanned<BTreeMap<Spanned<String>, Spanned<toml::Value>>>;

/// A section: where it starts, and its keys in the file's order.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Section {
    /// "file:line:column" of the section.
    pub at: String,
    /// What it is called in messages: `[manager]`, `tasks."x".policy`.
    pub name: String,
    pub entries: Vec<Entry>,
}

/// One key of a section.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Entry {
    pub key: String,
    /// "file:line:column" of the key, and of its value.
    pub key_at: String,
    pub value_at: String,
    pub value: toml::Value,
}

impl Section {
    pub(super) fn new(raw: Raw, name: String, lines: &Lines<'_>) -> Self {
        let at = lines.at(raw.span().start);
        let mut entries: Vec<(usize, Entry)> = raw
            .into_inner()
            .into_iter()
            .map(|(key, value)| {
                let start = key.span().start;
                let entry = Entry {
                    key_at: lines.at(start),
                    value_at: lines.at(value.span().start),
                    key: key.into_inner(),
                    value: value.into_inner(),
                };
                (start, entry)
            })
            .collect();
        entries.sort_by_key(|(start, _)| *start);
        Self {
            at,
            name,
            entries: entries.into_iter().map(|(_, e)| e).collect(),
        }
    }

    /// The error for a key the reader does not know.
    pub fn unknown(&self, entry: &Entry, known: &[&str]) -> Error {
        Error::invalid(format!(
            "{}: {}: unknown key {}, expected one of {}",
            entry.key_at,
            self.name,
            crate::words::echo(&entry.key),
            known.join(", ")
        ))
    }

    /// The error for a bad value of `entry`, at the value.
    pub fn bad(&self, entry: &Entry, why: impl std::fmt::Display) -> Error {
        Error::invalid(format!(
            "{}: {}.{}: {why}",
            entry.value_at, self.name, entry.key
        ))
    }
}

impl Entry {
    /// The value as a `T`, or an error at it naming the section and key.
    pub fn get<T: DeserializeOwned>(&self, section: &Section) -> Result<T> {
        T::deserialize(self.value.clone())
            .map_err(|e| section.bad(self, e.message().trim_end().replace('\n', " ")))
    }
}
