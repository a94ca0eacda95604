//! A JSON Pointer (RFC 6901) looked up while the body is parsed: the parser walks the
//! document once, skips every value off the pointer's path without building it, and builds
//! only the value the pointer names. A large response costs one pass and no tree.

use std::fmt;

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::Value;

/// The value at `pointer` in the JSON document `body`, or `None` when the body is not JSON
/// or holds nothing there. The empty pointer names the whole document.
pub(crate) fn lookup(body: &[u8], pointer: &str) -> Option<Value> {
    let tokens = tokens(pointer)?;
    let mut de = serde_json::Deserializer::from_slice(body);
    let found = Seek(&tokens).deserialize(&mut de).ok()?;
    de.end().ok()?;
    found
}

/// The pointer's reference tokens, unescaped (`~1` is `/`, `~0` is `~`); `None` when it is
/// not a pointer. The empty pointer has none: it names the whole document. A gRPC step's
/// pointers are cut by the same rule where the CLI compiles them.
pub fn tokens(pointer: &str) -> Option<Vec<String>> {
    if pointer.is_empty() {
        return Some(Vec::new());
    }
    let rest = pointer.strip_prefix('/')?;
    Some(
        rest.split('/')
            .map(|t| t.replace("~1", "/").replace("~0", "~"))
            .collect(),
    )
}

/// An array index token: decimal digits without a leading zero.
fn index(token: &str) -> Option<usize> {
    let digits = !token.is_empty() && token.bytes().all(|b| b.is_ascii_digit());
    if !digits || (token.len() > 1 && token.starts_with('0')) {
        return None;
    }
    token.parse().ok()
}

/// Looks for the remaining tokens in the value being parsed.
struct Seek<'t>(&'t [String]);

impl<'de> DeserializeSeed<'de> for Seek<'_> {
    type Value = Option<Value>;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        if self.0.is_empty() {
            return Value::deserialize(d).map(Some);
        }
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Seek<'_> {
    type Value = Option<Value>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    // A scalar has nothing inside: the pointer goes past it.
    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let (head, rest) = self.0.split_first().expect("visited with a token left");
        let mut found = None;
        while let Some(hit) = map.next_key_seed(KeyIs(head))? {
            // The first member of that name counts; the rest are skipped like any other.
            if hit && found.is_none() {
                found = Some(map.next_value_seed(Seek(rest))?);
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(found.flatten())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let (head, rest) = self.0.split_first().expect("visited with a token left");
        let want = index(head);
        let mut found = None;
        let mut i = 0usize;
        loop {
            if Some(i) == want {
                match seq.next_element_seed(Seek(rest))? {
                    Some(v) => found = v,
                    None => break,
                }
            } else if seq.next_element::<IgnoredAny>()?.is_none() {
                break;
            }
            i += 1;
        }
        Ok(found)
    }
}

/// Whether an object key equals the token, compared as it is parsed (no key is kept).
struct KeyIs<'t>(&'t str);

impl<'de> DeserializeSeed<'de> for KeyIs<'_> {
    type Value = bool;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeyIs<'_> {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object key")
    }

    fn visit_str<E>(self, key: &str) -> Result<bool, E> {
        Ok(key == self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const DOC: &str = r#"{"a":{"b":[10,{"c":"x"},[true]]},"a/b":1,"m~n":2,"":3,"big":{"skip":[1,2,{"d":null}]},"e":"\u00e9t\u00e9","dup":1,"dup":2}"#;

    #[test]
    fn finds_what_a_tree_would() {
        let tree: Value = serde_json::from_str(DOC).unwrap();
        for p in [
            "",
            "/a",
            "/a/b",
            "/a/b/0",
            "/a/b/1/c",
            "/a/b/2/0",
            "/a~1b",
            "/m~0n",
            "/",
            "/e",
            "/big/skip/2/d",
            "/a/b/3",
            "/a/b/01",
            "/a/b/-",
            "/a/c",
            "/a/b/1/c/d",
            "/nope",
        ] {
            assert_eq!(lookup(DOC.as_bytes(), p).as_ref(), tree.pointer(p), "{p}");
        }
        // Of two members with one name, the first counts (a tree keeps the last).
        assert_eq!(lookup(DOC.as_bytes(), "/dup"), Some(Value::from(1)));
    }

    #[test]
    fn refuses_what_is_not_json_or_not_a_pointer() {
        assert_eq!(lookup(b"{\"a\":1", "/a"), None);
        assert_eq!(lookup(b"{\"a\":1} x", "/a"), None);
        assert_eq!(lookup(b"not json", ""), None);
        assert_eq!(lookup(DOC.as_bytes(), "a"), None);
    }

    fn json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i32>().prop_map(Value::from),
            "[a-c/~]{0,3}".prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 32, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
                proptest::collection::btree_map("[a-c/~]{0,2}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// On any document and any pointer into it (or past it), the lookup equals the
        /// tree's, and arbitrary bytes never make it panic.
        #[test]
        fn equals_the_tree_lookup(doc in json(), path in proptest::collection::vec("[a-c/~]{0,2}|[0-3]", 0..4)) {
            let text = serde_json::to_vec(&doc).unwrap();
            let pointer: String = path
                .iter()
                .map(|t| format!("/{}", t.replace('~', "~0").replace('/', "~1")))
                .collect();
            let found = lookup(&text, &pointer);
            prop_assert_eq!(found.as_ref(), doc.pointer(&pointer));
        }

        #[test]
        fn hostile_bytes_never_panic(body in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = lookup(&body, "/a/0");
        }
    }
}
