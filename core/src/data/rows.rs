//! A data source's rows in one arena: every cell's text in one buffer and the end of each
//! cell in a list of offsets, shared by reference between clones.
//!
//! A table of millions of short rows held as `Vec<Vec<String>>` costs two heap blocks and
//! 48 bytes of headers per row before its text; here a row costs its text and 4 bytes a
//! cell, and a clone of the scenario that carries it costs nothing. On the wire and in the
//! schema the rows are still a list of lists of strings, read straight into the arena.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::de::{DeserializeSeed, SeqAccess, Visitor};
use serde::ser::{SerializeSeq, Serializer};
use serde::{Deserialize, Deserializer, Serialize};

/// Why a row cannot join a table.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RowsError {
    /// Every row has as many values as the first one.
    #[error("row {row} has {values} values, row 0 has {width}")]
    Ragged {
        /// The row's index.
        row: usize,
        /// Its values.
        values: usize,
        /// The first row's values.
        width: usize,
    },
    /// Offsets are `u32`: the cells' text stops at 4 GiB.
    #[error("the rows' text is larger than 4 GiB")]
    TooLarge,
}

/// Why packed rows (the cells' text and the end of each cell, as the wire carries them)
/// cannot be read: each variant names the part at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PackedError {
    /// The offsets do not make whole rows.
    #[error("{ends} values do not make rows of {width} columns")]
    Width {
        /// The offsets given.
        ends: usize,
        /// The values a row has.
        width: usize,
    },
    /// An offset before the one ahead of it, past the text, or inside a character.
    #[error(
        "{end} is not the end of a value: the values before end at {start}, the cells hold \
         {len} bytes"
    )]
    End {
        /// The offset's index in `ends`.
        index: usize,
        /// The offset as given.
        end: u32,
        /// Where the value it ends starts.
        start: usize,
        /// The text's length.
        len: usize,
    },
    /// Text after the last value's end.
    #[error("{len} bytes, of which the values take {used}")]
    Trailing {
        /// The text's length.
        len: usize,
        /// The bytes the values take.
        used: usize,
    },
}

impl PackedError {
    /// The part at fault (`ends[i]`, `cells`, or `ends` for a count that makes no rows),
    /// for a caller that names it under its own field.
    pub fn part(&self) -> String {
        match self {
            Self::Width { .. } => "ends".to_string(),
            Self::End { index, .. } => format!("ends[{index}]"),
            Self::Trailing { .. } => "cells".to_string(),
        }
    }
}

/// Rows of equal width, cell after cell in one buffer. Cloning shares the buffer; the first
/// change to a shared table copies it.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Rows(Arc<Arena>);

#[derive(Clone, Default, PartialEq, Eq)]
struct Arena {
    /// Values per row: the first row's.
    width: usize,
    rows: usize,
    text: String,
    /// The end of each cell in `text`, row after row.
    ends: Vec<u32>,
}

impl Rows {
    /// Rows given as lists of values, all as long as the first.
    pub fn from_rows<R, S>(rows: impl IntoIterator<Item = R>) -> Result<Self, RowsError>
    where
        R: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut t = Self::default();
        for row in rows {
            t.push(row)?;
        }
        Ok(t)
    }

    /// Rows as the wire packs them: `text` holds every value, row after row, and `ends` the
    /// end of each value in it, `width` to a row. Taken without a copy, since a received
    /// message is decoded once; no offset is trusted: each must end a value at or after the
    /// end of the one before, on a character boundary, and the last must end the text.
    pub fn from_packed(text: String, ends: Vec<u32>, width: usize) -> Result<Self, PackedError> {
        // A width of 0 holds no value: only an empty list is whole.
        if !ends.len().is_multiple_of(width) {
            return Err(PackedError::Width {
                ends: ends.len(),
                width,
            });
        }
        let mut start = 0usize;
        for (index, &end) in ends.iter().enumerate() {
            let at = end as usize;
            if at < start || !text.is_char_boundary(at) {
                return Err(PackedError::End {
                    index,
                    end,
                    start,
                    len: text.len(),
                });
            }
            start = at;
        }
        if start != text.len() {
            return Err(PackedError::Trailing {
                len: text.len(),
                used: start,
            });
        }
        Ok(Self(Arc::new(Arena {
            width,
            rows: ends.len().checked_div(width).unwrap_or(0),
            text,
            ends,
        })))
    }

    /// Appends a row, which must have as many values as the first.
    pub fn push<S: AsRef<str>>(
        &mut self,
        row: impl IntoIterator<Item = S>,
    ) -> Result<(), RowsError> {
        let a = Arc::make_mut(&mut self.0);
        let start = a.ends.len();
        for cell in row {
            if let Err(e) = a.push_cell(cell.as_ref()) {
                a.truncate(start);
                return Err(e);
            }
        }
        a.end_row(start)
    }

    /// The number of rows.
    pub fn len(&self) -> usize {
        self.0.rows
    }

    /// Whether there is no row.
    pub fn is_empty(&self) -> bool {
        self.0.rows == 0
    }

    /// Values per row (those of the first row; 0 when there is none).
    pub fn width(&self) -> usize {
        self.0.width
    }

    /// Row `i`, or `None` past the last.
    pub fn row(&self, i: usize) -> Option<Row<'_>> {
        (i < self.0.rows).then_some(Row {
            arena: &self.0,
            first: i * self.0.width,
        })
    }

    /// The rows in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = Row<'_>> + '_ {
        (0..self.0.rows).map(|i| Row {
            arena: &self.0,
            first: i * self.0.width,
        })
    }

    /// The rows as lists of values: for tests and small tables.
    pub fn to_vec(&self) -> Vec<Vec<&str>> {
        self.iter().map(|r| r.iter().collect()).collect()
    }

    /// Bytes these rows cost an agent that receives them all: their text, 4 bytes a value's
    /// end and 4 a row's position, as the wire packs them (see
    /// [`crate::scenario::MAX_AGENT_DATA_BYTES`]).
    pub fn share_bytes(&self) -> usize {
        self.0.text.len() + 4 * self.0.ends.len() + 4 * self.0.rows
    }

    /// Bytes the table holds on the heap (its text and offsets).
    pub fn heap_bytes(&self) -> usize {
        self.0.text.capacity() + self.0.ends.capacity() * 4
    }
}

impl Arena {
    fn push_cell(&mut self, cell: &str) -> Result<(), RowsError> {
        self.text.push_str(cell);
        let end = u32::try_from(self.text.len()).map_err(|_| RowsError::TooLarge)?;
        self.ends.push(end);
        Ok(())
    }

    /// Closes the row whose cells start at `start`, or takes it back when its width is wrong.
    fn end_row(&mut self, start: usize) -> Result<(), RowsError> {
        let values = self.ends.len() - start;
        if self.rows == 0 {
            self.width = values;
        } else if values != self.width {
            self.truncate(start);
            return Err(RowsError::Ragged {
                row: self.rows,
                values,
                width: self.width,
            });
        }
        self.rows += 1;
        Ok(())
    }

    fn truncate(&mut self, cells: usize) {
        self.ends.truncate(cells);
        let len = self.ends.last().map_or(0, |&e| e as usize);
        self.text.truncate(len);
    }

    fn cell(&self, i: usize) -> &str {
        let start = match i.checked_sub(1) {
            Some(j) => self.ends.get(j).copied().unwrap_or(0) as usize,
            None => 0,
        };
        let end = self.ends.get(i).copied().unwrap_or(0) as usize;
        self.text.get(start..end).unwrap_or_default()
    }
}

/// One row of a [`Rows`].
#[derive(Clone, Copy)]
pub struct Row<'a> {
    arena: &'a Arena,
    first: usize,
}

impl<'a> Row<'a> {
    /// The number of values.
    pub fn len(&self) -> usize {
        self.arena.width
    }

    /// Whether the row has no value (its source has no column).
    pub fn is_empty(&self) -> bool {
        self.arena.width == 0
    }

    /// Value `column`, or `None` past the last.
    pub fn get(&self, column: usize) -> Option<&'a str> {
        (column < self.arena.width).then(|| self.arena.cell(self.first + column))
    }

    /// The values in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &'a str> + 'a {
        let (arena, first) = (self.arena, self.first);
        (first..first + arena.width).map(move |i| arena.cell(i))
    }
}

impl fmt::Debug for Row<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl fmt::Debug for Rows {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl Serialize for Row<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.len()))?;
        for v in self.iter() {
            seq.serialize_element(v)?;
        }
        seq.end()
    }
}

impl Serialize for Rows {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.len()))?;
        for r in self.iter() {
            seq.serialize_element(&r)?;
        }
        seq.end()
    }
}

/// Reads a list of rows into the arena as it goes: no row is ever a `Vec` of its own.
impl<'de> Deserialize<'de> for Rows {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Table;
        impl<'de> Visitor<'de> for Table {
            type Value = Rows;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of rows, each a list of strings")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Rows, A::Error> {
                let mut a = Arena::default();
                loop {
                    let start = a.ends.len();
                    match seq.next_element_seed(RowSeed(&mut a))? {
                        Some(()) => a.end_row(start).map_err(serde::de::Error::custom)?,
                        None => break,
                    }
                }
                a.text.shrink_to_fit();
                a.ends.shrink_to_fit();
                Ok(Rows(Arc::new(a)))
            }
        }
        d.deserialize_seq(Table)
    }
}

/// One row, its values appended to the arena.
struct RowSeed<'a>(&'a mut Arena);

impl<'de> DeserializeSeed<'de> for RowSeed<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for RowSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a row: a list of strings")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(CellSeed(self.0))?.is_some() {}
        Ok(())
    }
}

/// One value, appended to the arena (as `String` reads one: text, or UTF-8 bytes).
struct CellSeed<'a>(&'a mut Arena);

impl<'de> DeserializeSeed<'de> for CellSeed<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_string(self)
    }
}

impl<'de> Visitor<'de> for CellSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<(), E> {
        self.0.push_cell(v).map_err(E::custom)
    }
    fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<(), E> {
        match std::str::from_utf8(v) {
            Ok(s) => self.visit_str(s),
            Err(_) => Err(E::invalid_value(serde::de::Unexpected::Bytes(v), &self)),
        }
    }
}

/// The schema of a list of lists of strings, as the rows are written.
impl JsonSchema for Rows {
    fn inline_schema() -> bool {
        <Vec<Vec<String>>>::inline_schema()
    }

    fn schema_name() -> Cow<'static, str> {
        <Vec<Vec<String>>>::schema_name()
    }

    fn schema_id() -> Cow<'static, str> {
        <Vec<Vec<String>>>::schema_id()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        <Vec<Vec<String>>>::json_schema(generator)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Packed rows read into the arena as they are; every offset that does not end a value
    /// is refused with its index, and so is text past the last value.
    #[test]
    fn packed_rows_are_read_without_trusting_an_offset() {
        let r = Rows::from_packed("1ab\u{e9}c".into(), vec![1, 3, 3, 6], 2).unwrap();
        assert_eq!(r.to_vec(), [vec!["1", "ab"], vec!["", "\u{e9}c"]]);
        assert_eq!(
            Rows::from_packed(String::new(), vec![], 3).unwrap().len(),
            0
        );
        let err = |text: &str, ends: Vec<u32>, width| {
            let e = Rows::from_packed(text.into(), ends, width).unwrap_err();
            format!("{}: {e}", e.part())
        };
        assert_eq!(
            err("abc", vec![2, 1, 3], 1),
            "ends[1]: 1 is not the end of a value: the values before end at 2, the cells hold 3 bytes"
        );
        assert_eq!(
            err("abc", vec![1, 9], 2),
            "ends[1]: 9 is not the end of a value: the values before end at 1, the cells hold 3 bytes"
        );
        assert!(err("\u{e9}", vec![1], 1).starts_with("ends[0]: 1 is not"));
        assert_eq!(
            err("abcd", vec![1, 3], 2),
            "cells: 4 bytes, of which the values take 3"
        );
        assert_eq!(
            err("", vec![0, 0, 0], 2),
            "ends: 3 values do not make rows of 2 columns"
        );
        assert_eq!(
            err("", vec![0], 0),
            "ends: 1 values do not make rows of 0 columns"
        );
        assert_eq!(
            err("x", vec![], 0),
            "cells: 1 bytes, of which the values take 0"
        );
    }

    #[test]
    fn rows_round_trip_through_json_and_yaml() {
        let r = Rows::from_rows([["1", "a, b"], ["", "c"]]).unwrap();
        assert_eq!(r.to_vec(), [vec!["1", "a, b"], vec!["", "c"]]);
        assert_eq!((r.len(), r.width()), (2, 2));
        let json = serde_json::to_string(&r).unwrap();
        assert_eq!(json, r#"[["1","a, b"],["","c"]]"#);
        assert_eq!(serde_json::from_str::<Rows>(&json).unwrap(), r);
        let yaml: Rows = serde_norway::from_str("- [1, x]\n- ['', c]\n").unwrap();
        assert_eq!(yaml.to_vec(), [vec!["1", "x"], vec!["", "c"]]);
        let empty: Rows = serde_json::from_str("[[], []]").unwrap();
        assert_eq!((empty.len(), empty.width()), (2, 0));
        assert_eq!(format!("{r:?}"), r#"[["1", "a, b"], ["", "c"]]"#);
    }

    #[test]
    fn a_ragged_table_is_refused_and_left_as_it_was() {
        let e = serde_json::from_str::<Rows>(r#"[["a"],["b"],["c","d"]]"#).unwrap_err();
        assert!(
            e.to_string().starts_with("row 2 has 2 values, row 0 has 1"),
            "{e}"
        );
        let mut r = Rows::from_rows([["a", "b"]]).unwrap();
        assert_eq!(
            r.push(["c"]),
            Err(RowsError::Ragged {
                row: 1,
                values: 1,
                width: 2
            })
        );
        assert_eq!(r.to_vec(), [vec!["a", "b"]]);
        assert!(serde_json::from_str::<Rows>(r#"[["a"], [1]]"#).is_err());
        assert!(serde_json::from_str::<Rows>(r#"["a"]"#).is_err());
    }

    #[test]
    fn clones_share_the_arena_until_one_changes() {
        let a = Rows::from_rows((0..100).map(|i| [i.to_string()])).unwrap();
        let mut b = a.clone();
        assert!(Arc::ptr_eq(&a.0, &b.0));
        b.push(["x"]).unwrap();
        assert_eq!((a.len(), b.len()), (100, 101));
        assert_eq!(a.row(42).unwrap().get(0), Some("42"));
        assert!(a.row(100).is_none());
        assert_eq!(a.row(0).unwrap().get(1), None);
    }
}
