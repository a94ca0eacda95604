//! A field's path in a wire message (`progress.samples[0].steps[2].response_hist`), written out
//! only when an error names it.
//!
//! A Progress names a few dozen fields on its way to the merge, one per histogram and
//! counter set; formatting each path up front, for errors that almost never happen, was a few
//! per cent of the CPU of a controller merging a thousand agents' intervals.

use std::fmt;

/// A field's path: a name (with an index when it is a list's element), under its parent's
/// path. `Copy`, and a borrow of its parent: building one costs nothing.
#[derive(Debug, Clone, Copy)]
pub struct Path<'a> {
    parent: Option<&'a Path<'a>>,
    name: &'a str,
    index: Option<usize>,
}

impl<'a> Path<'a> {
    /// The path of a message, or of a field given whole (`progress`).
    pub fn root(name: &'a str) -> Self {
        Self {
            parent: None,
            name,
            index: None,
        }
    }

    /// The field `name` of this message (`progress.counters`).
    pub fn field(&'a self, name: &'a str) -> Self {
        Self {
            parent: Some(self),
            name,
            index: None,
        }
    }

    /// Element `index` of the list field `name` of this message (`progress.samples[0]`).
    pub fn at(&'a self, name: &'a str, index: usize) -> Self {
        Self {
            parent: Some(self),
            name,
            index: Some(index),
        }
    }
}

impl fmt::Display for Path<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(p) = self.parent {
            write!(f, "{p}.")?;
        }
        f.write_str(self.name)?;
        if let Some(i) = self.index {
            write!(f, "[{i}]")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::Path;

    #[test]
    fn a_path_reads_as_the_proto_names_it() {
        let progress = Path::root("progress");
        let sample = progress.at("samples", 3);
        let step = sample.at("steps", 0);
        assert_eq!(
            step.field("ttfb_hist").to_string(),
            "progress.samples[3].steps[0].ttfb_hist"
        );
        assert_eq!(
            sample.field("counters").to_string(),
            "progress.samples[3].counters"
        );
        assert_eq!(Path::root("s").to_string(), "s");
    }
}
