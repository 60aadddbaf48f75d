//! String arrays held as one text and the offsets between its strings.

use std::fmt;

/// A string array (a vocabulary's tokens, a merge list) stored as one text
/// and where each string starts: a quarter of a million tokens are two
/// allocations rather than one each, which is most of what opening a large
/// vocabulary's file costs.
#[derive(Clone, PartialEq, Eq)]
pub struct StrArray {
    text: String,
    /// Where each string starts in `text`, then where the last one ends.
    offsets: Vec<usize>,
}

impl StrArray {
    /// An empty array with room for `n` strings' offsets.
    pub fn with_capacity(n: usize) -> Self {
        let mut offsets = Vec::with_capacity(n + 1);
        offsets.push(0);
        StrArray {
            text: String::new(),
            offsets,
        }
    }

    /// Appends one string.
    pub fn push(&mut self, s: &str) {
        self.text.push_str(s);
        self.offsets.push(self.text.len());
    }

    /// The number of strings.
    pub fn len(&self) -> usize {
        self.offsets.len() - 1
    }

    /// Whether there are no strings.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// String `i`, or `None` past the end.
    pub fn get(&self, i: usize) -> Option<&str> {
        let (start, end) = (*self.offsets.get(i)?, *self.offsets.get(i + 1)?);
        self.text.get(start..end)
    }

    /// The strings in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &str> + DoubleEndedIterator + '_ {
        self.offsets.windows(2).map(|w| &self.text[w[0]..w[1]])
    }

    /// The total length of the strings in bytes.
    pub fn text_len(&self) -> usize {
        self.text.len()
    }

    /// The strings as owned values.
    pub fn to_vec(&self) -> Vec<String> {
        self.iter().map(str::to_owned).collect()
    }
}

impl Default for StrArray {
    fn default() -> Self {
        StrArray::with_capacity(0)
    }
}

impl std::ops::Index<usize> for StrArray {
    type Output = str;

    /// String `i`; panics past the end, as a slice does.
    fn index(&self, i: usize) -> &str {
        match self.get(i) {
            Some(s) => s,
            None => panic!("string {i} of a {}-string array", self.len()),
        }
    }
}

impl<S: AsRef<str>> FromIterator<S> for StrArray {
    fn from_iter<I: IntoIterator<Item = S>>(items: I) -> Self {
        let mut out = StrArray::default();
        for s in items {
            out.push(s.as_ref());
        }
        out
    }
}

impl From<Vec<String>> for StrArray {
    fn from(v: Vec<String>) -> Self {
        v.iter().collect()
    }
}

impl fmt::Debug for StrArray {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::StrArray;

    #[test]
    fn strings_come_back_as_pushed() {
        let words = ["", "▁the", "", "a b", "日本"];
        let a: StrArray = words.iter().collect();
        assert_eq!(a.len(), 5);
        assert_eq!(a.iter().collect::<Vec<_>>(), words);
        assert_eq!(a.iter().next_back(), Some("日本"));
        assert_eq!((a.get(3), a.get(5)), (Some("a b"), None));
        assert_eq!(&a[1], "▁the");
        assert_eq!(a.text_len(), "▁the".len() + 3 + "日本".len());
        assert_eq!(a, StrArray::from(a.to_vec()));
        assert!(StrArray::default().is_empty() && StrArray::default().get(0).is_none());
        assert_eq!(
            format!("{:?}", StrArray::from(vec!["x".to_string()])),
            "[\"x\"]"
        );
    }
}
