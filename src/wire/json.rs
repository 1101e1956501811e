//! JSON text handling that keeps client data verbatim.
//!
//! Job `args`, `meta`, results and unknown attributes are stored and returned exactly as the
//! client sent them, so request bodies are never parsed into a generic value tree. Instead a
//! body is [`compact`]ed once (insignificant whitespace removed, nesting depth checked), parsed
//! into an [`Object`] of borrowed [`RawValue`]s, and only the fields the server interprets are
//! deserialized.

use std::borrow::Cow;

use indexmap::IndexMap;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;

/// The nesting depth limit of every request body (objects and arrays).
pub const MAX_DEPTH: usize = 32;

/// Why a body cannot be compacted. Each variant but `TooDeep` carries the byte offset of the
/// offending value; [`path_at`] names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unacceptable {
    /// Nested deeper than the limit.
    TooDeep,
    /// A string holds `\u0000`, which PostgreSQL cannot store in text (nor in json values it
    /// has to read, nor in jsonb).
    NullCharacter(usize),
    /// A string holds a UTF-16 surrogate escape (`\ud800`) that is not half of a pair: it
    /// stands for no character, and PostgreSQL refuses it.
    LoneSurrogate(usize),
    /// A number no IEEE 754 double holds: beyond ±1.8e308, a non-zero number that would read
    /// as 0 (below 5e-324), or longer than [`MAX_NUMBER_CHARS`]. PostgreSQL cannot store the
    /// largest, and the server reads numbers as doubles where it reads them (unique keys), so
    /// such numbers would be compared wrongly.
    NumberOutOfRange(usize),
}

/// The longest number accepted, in characters.
pub const MAX_NUMBER_CHARS: usize = 400;

impl Unacceptable {
    /// What is wrong, for an error message naming the field at `path`.
    pub fn describe(self, path: &str) -> String {
        match self {
            Unacceptable::TooDeep => {
                format!("The request body is nested deeper than {MAX_DEPTH} levels.")
            }
            Unacceptable::NullCharacter(_) => format!(
                "{path} contains the character U+0000 (\\u0000), which cannot be stored; remove it."
            ),
            Unacceptable::LoneSurrogate(_) => format!(
                "{path} contains a lone UTF-16 surrogate escape (\\ud800-\\udfff without its pair), which is not a character and cannot be stored."
            ),
            Unacceptable::NumberOutOfRange(_) => format!(
                "{path} holds a number that cannot be stored: numbers must be finite doubles (at most about 1.8e308 in magnitude, non-zero ones at least 5e-324) of at most {MAX_NUMBER_CHARS} characters."
            ),
        }
    }

    /// The byte offset of the offending value, if there is one.
    pub fn offset(self) -> Option<usize> {
        match self {
            Unacceptable::TooDeep => None,
            Unacceptable::NullCharacter(at)
            | Unacceptable::LoneSurrogate(at)
            | Unacceptable::NumberOutOfRange(at) => Some(at),
        }
    }
}

/// The four hex digits of a `\u` escape whose `u` is at `u`, as a code unit.
fn escape_unit(input: &[u8], u: usize) -> Option<u16> {
    let hex = std::str::from_utf8(input.get(u + 1..u + 5)?).ok()?;
    u16::from_str_radix(hex, 16).ok()
}

/// Whether the number starting at `start` is one a double holds; returns where it ends.
fn number_in_range(input: &[u8], start: usize) -> (usize, bool) {
    let end = input[start..]
        .iter()
        .position(|b| !matches!(b, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'))
        .map_or(input.len(), |n| start + n);
    let text = &input[start..end];
    if text.len() > MAX_NUMBER_CHARS {
        return (end, false);
    }
    let Some(value) = std::str::from_utf8(text)
        .ok()
        .and_then(|t| t.parse::<f64>().ok())
    else {
        // Not a number at all: the parser that follows reports it.
        return (end, true);
    };
    let mantissa = text
        .split(|b| matches!(b, b'e' | b'E'))
        .next()
        .unwrap_or_default();
    let underflow = value == 0.0 && mantissa.iter().any(|b| matches!(b, b'1'..=b'9'));
    (end, value.is_finite() && !underflow)
}

/// Removes whitespace outside strings, checks the nesting depth, and refuses what PostgreSQL
/// cannot store or the server cannot read back faithfully ([`Unacceptable`]).
///
/// Does not validate the JSON (the parser that follows does); it only needs to track whether
/// it is inside a string. Returns the input unchanged (borrowed) when it is already compact.
pub fn compact(input: &[u8], max_depth: usize) -> Result<Cow<'_, [u8]>, Unacceptable> {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    // Where the `u` of the low half of a surrogate pair must be.
    let mut low_surrogate_at = None;
    // Bytes before this index belong to a number already checked.
    let mut number_end = 0usize;
    let mut output: Option<Vec<u8>> = None;
    for (i, &byte) in input.iter().enumerate() {
        if in_string {
            if escaped {
                escaped = false;
                if byte == b'u' {
                    match escape_unit(input, i) {
                        Some(0) => return Err(Unacceptable::NullCharacter(i)),
                        Some(0xD800..=0xDBFF) => {
                            let low = i + 6;
                            if input.get(i + 5) != Some(&b'\\')
                                || input.get(low) != Some(&b'u')
                                || !matches!(escape_unit(input, low), Some(0xDC00..=0xDFFF))
                            {
                                return Err(Unacceptable::LoneSurrogate(i));
                            }
                            low_surrogate_at = Some(low);
                        }
                        Some(0xDC00..=0xDFFF) if low_surrogate_at != Some(i) => {
                            return Err(Unacceptable::LoneSurrogate(i));
                        }
                        _ => {}
                    }
                }
            } else if byte == b'\\' {
                escaped = true;
            } else if byte == b'"' {
                in_string = false;
            }
        } else {
            match byte {
                b'"' => in_string = true,
                b'{' | b'[' => {
                    depth += 1;
                    if depth > max_depth {
                        return Err(Unacceptable::TooDeep);
                    }
                }
                b'}' | b']' => depth = depth.saturating_sub(1),
                b' ' | b'\t' | b'\n' | b'\r' => {
                    output.get_or_insert_with(|| {
                        let mut v = Vec::with_capacity(input.len());
                        v.extend_from_slice(&input[..i]);
                        v
                    });
                    continue;
                }
                b'-' | b'0'..=b'9' if i >= number_end => {
                    let (end, in_range) = number_in_range(input, i);
                    if !in_range {
                        return Err(Unacceptable::NumberOutOfRange(i));
                    }
                    number_end = end;
                }
                _ => {}
            }
        }
        if let Some(out) = output.as_mut() {
            out.push(byte);
        }
    }
    Ok(match output {
        Some(out) => Cow::Owned(out),
        None => Cow::Borrowed(input),
    })
}

/// The path (`$.a[2].b`) of the value at byte `offset` of a JSON text, for error messages.
pub fn path_at(input: &[u8], offset: usize) -> String {
    enum Frame {
        Object {
            key: Option<String>,
            expecting_key: bool,
        },
        Array {
            index: usize,
        },
    }
    let mut stack: Vec<Frame> = Vec::new();
    let mut i = 0;
    while i < offset.min(input.len()) {
        match input[i] {
            b'"' => {
                let mut end = i + 1;
                let mut escaped = false;
                while end < input.len() {
                    match input[end] {
                        _ if escaped => escaped = false,
                        b'\\' => escaped = true,
                        b'"' => break,
                        _ => {}
                    }
                    end += 1;
                }
                if end >= offset {
                    break;
                }
                if let Some(Frame::Object { key, expecting_key }) = stack.last_mut()
                    && *expecting_key
                {
                    let text = &input[i..=end.min(input.len() - 1)];
                    *key = Some(serde_json::from_slice::<String>(text).unwrap_or_else(|_| {
                        String::from_utf8_lossy(&text[1..text.len() - 1]).into_owned()
                    }));
                    *expecting_key = false;
                }
                i = end;
            }
            b'{' => stack.push(Frame::Object {
                key: None,
                expecting_key: true,
            }),
            b'[' => stack.push(Frame::Array { index: 0 }),
            b'}' | b']' => {
                stack.pop();
            }
            b',' => match stack.last_mut() {
                Some(Frame::Object { expecting_key, .. }) => *expecting_key = true,
                Some(Frame::Array { index }) => *index += 1,
                None => {}
            },
            _ => {}
        }
        i += 1;
    }
    let mut path = String::from("$");
    for frame in &stack {
        match frame {
            Frame::Object { key: Some(key), .. } => {
                if !key.is_empty() && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                    path.push('.');
                    path.push_str(key);
                } else {
                    path.push_str(&format!("[{}]", serde_json::Value::from(key.as_str())));
                }
            }
            Frame::Object { key: None, .. } => {}
            Frame::Array { index } => path.push_str(&format!("[{index}]")),
        }
    }
    path
}

/// The JSON type of a raw value, read from its first byte (raw values are compact and valid).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Object,
    Array,
    String,
    Number,
    Bool,
    Null,
}

impl Kind {
    /// Classifies a raw value.
    pub fn of(raw: &RawValue) -> Kind {
        match raw.get().as_bytes().first() {
            Some(b'{') => Kind::Object,
            Some(b'[') => Kind::Array,
            Some(b'"') => Kind::String,
            Some(b't' | b'f') => Kind::Bool,
            Some(b'n') => Kind::Null,
            _ => Kind::Number,
        }
    }

    /// The name used in error messages ("an object", "a string", ...).
    pub fn article_name(self) -> &'static str {
        match self {
            Kind::Object => "an object",
            Kind::Array => "an array",
            Kind::String => "a string",
            Kind::Number => "a number",
            Kind::Bool => "a boolean",
            Kind::Null => "null",
        }
    }
}

/// A JSON object whose member values are borrowed raw JSON, in document order.
///
/// Duplicate keys keep their first position and their last value.
#[derive(Debug, Default, Clone)]
pub struct Object<'a> {
    members: IndexMap<String, &'a RawValue>,
}

impl<'a> Object<'a> {
    /// Parses `text` as a JSON object.
    pub fn parse(text: &'a str) -> Result<Self, serde_json::Error> {
        let members = serde_json::from_str(text)?;
        Ok(Object { members })
    }

    /// Parses a raw value that is known (or required) to be an object.
    pub fn from_raw(raw: &'a RawValue) -> Result<Self, serde_json::Error> {
        Self::parse(raw.get())
    }

    /// The raw value of `key`, treating an explicit JSON `null` as absent.
    pub fn get(&self, key: &str) -> Option<&'a RawValue> {
        self.members
            .get(key)
            .copied()
            .filter(|raw| Kind::of(raw) != Kind::Null)
    }

    /// The raw value of `key`, including an explicit JSON `null`.
    pub fn get_raw(&self, key: &str) -> Option<&'a RawValue> {
        self.members.get(key).copied()
    }

    /// Whether `key` is present (even as `null`).
    pub fn contains(&self, key: &str) -> bool {
        self.members.contains_key(key)
    }

    /// Members in document order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &'a RawValue)> + '_ {
        self.members.iter().map(|(k, v)| (k.as_str(), *v))
    }

    /// Number of members.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether the object has no members.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }
}

/// Deserializes a raw value into `T`.
pub fn decode<T: DeserializeOwned>(raw: &RawValue) -> Result<T, serde_json::Error> {
    serde_json::from_str(raw.get())
}

/// Reads a raw value as a non-negative or negative integer, rejecting fractions and exponents
/// that do not denote an integer.
pub fn as_integer(raw: &RawValue) -> Option<i64> {
    // JSON does not tell `2` from `2.0` or `2e0`, and neither does a JSON Schema `integer`.
    serde_json::from_str::<serde_json::Number>(raw.get())
        .ok()
        .and_then(|n| whole(&serde_json::Value::Number(n)))
}

/// The whole number `value` is, written `2`, `2.0` or `2e0`, as long as a double holds it
/// exactly.
pub fn whole(value: &serde_json::Value) -> Option<i64> {
    value.as_i64().or_else(|| {
        value
            .as_f64()
            .filter(|f| f.fract() == 0.0 && f.abs() <= MAX_EXACT_INTEGER)
            .map(|f| f as i64)
    })
}

/// The largest integer every double holds exactly (2^53).
const MAX_EXACT_INTEGER: f64 = 9_007_199_254_740_992.0;

/// Writes `members` as a compact JSON object, in order.
pub fn object_text<'m>(members: impl IntoIterator<Item = (&'m str, &'m RawValue)>) -> String {
    let mut out = String::from("{");
    for (i, (key, value)) in members.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        // Serializing a &str cannot fail.
        out.push_str(&serde_json::to_string(key).unwrap_or_default());
        out.push(':');
        out.push_str(value.get());
    }
    out.push('}');
    out
}

/// Wraps already-valid JSON text as a raw value without copying it through a parser twice.
pub fn raw(text: String) -> Box<RawValue> {
    // The text comes from the database (json columns) or from our own serializer, so it is
    // valid; fall back to `null` rather than panic if that invariant is ever broken.
    RawValue::from_string(text).unwrap_or_else(|_| null())
}

/// `value` without insignificant whitespace (jsonb renders `{"a": 1}`; responses are compact).
pub fn compact_raw(value: Box<RawValue>) -> Box<RawValue> {
    match compact(value.get().as_bytes(), usize::MAX) {
        Ok(Cow::Owned(bytes)) => String::from_utf8(bytes).map_or(value, raw),
        Ok(Cow::Borrowed(_)) | Err(_) => value,
    }
}

/// A raw JSON `null`.
pub fn null() -> Box<RawValue> {
    RawValue::from_string("null".to_owned()).expect("null is valid JSON")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compacted(s: &str) -> String {
        String::from_utf8(compact(s.as_bytes(), MAX_DEPTH).unwrap().into_owned()).unwrap()
    }

    #[test]
    fn compact_removes_whitespace_outside_strings_only() {
        assert_eq!(
            compacted("{ \"a b\" : [1, 2,\n\t3], \"c\":\"x \\\" y\" }"),
            "{\"a b\":[1,2,3],\"c\":\"x \\\" y\"}"
        );
    }

    #[test]
    fn compact_borrows_when_already_compact() {
        let input = br#"{"a":[1,{"b":null}]}"#;
        assert!(matches!(
            compact(input, MAX_DEPTH).unwrap(),
            Cow::Borrowed(_)
        ));
    }

    #[test]
    fn compact_raw_strips_the_spaces_jsonb_renders() {
        let stored = raw(r#"{"queues": ["a b"], "worker_id": "w1", "n": {"x": 1}}"#.to_owned());
        assert_eq!(
            compact_raw(stored).get(),
            r#"{"queues":["a b"],"worker_id":"w1","n":{"x":1}}"#
        );
    }

    #[test]
    fn compact_handles_escaped_backslash_before_quote() {
        assert_eq!(compacted(r#"["a\\", 1]"#), r#"["a\\",1]"#);
    }

    #[test]
    fn depth_limit_counts_objects_and_arrays() {
        let ok = "[".repeat(32) + &"]".repeat(32);
        let deep = "[".repeat(33) + &"]".repeat(33);
        assert!(compact(ok.as_bytes(), 32).is_ok());
        assert_eq!(compact(deep.as_bytes(), 32), Err(Unacceptable::TooDeep));
        // Brackets inside strings do not count.
        let in_string = format!("[\"{}\"]", "[".repeat(100));
        assert!(compact(in_string.as_bytes(), 32).is_ok());
    }

    #[test]
    fn the_nul_escape_is_refused_but_an_escaped_backslash_is_not() {
        for bad in [
            r#"["\u0000"]"#,
            r#"{"k\u0000":1}"#,
            r#"["a\\\u0000"]"#,
            r#"["\u00000"]"#,
        ] {
            assert!(
                matches!(
                    compact(bad.as_bytes(), 32),
                    Err(Unacceptable::NullCharacter(_))
                ),
                "{bad}"
            );
        }
        for ok in [r#"["\\u0000"]"#, r#"["\u0001", "u0000"]"#] {
            assert!(compact(ok.as_bytes(), 32).is_ok(), "{ok}");
        }
    }

    #[test]
    fn lone_surrogates_are_refused_and_pairs_are_not() {
        for bad in [
            r#"["\ud800"]"#,
            r#"["\uD800x"]"#,
            r#"["\udc00"]"#,
            r#"["\ud800\u0041"]"#,
            r#"["\ud800\ud800"]"#,
            r#"{"\udfff":1}"#,
        ] {
            assert!(
                matches!(
                    compact(bad.as_bytes(), 32),
                    Err(Unacceptable::LoneSurrogate(_))
                ),
                "{bad}"
            );
        }
        for ok in [
            r#"["\ud83d\ude00"]"#,
            r#"["\\ud800"]"#,
            r#"["\u00e9", "😀"]"#,
        ] {
            assert!(compact(ok.as_bytes(), 32).is_ok(), "{ok}");
        }
    }

    #[test]
    fn numbers_must_be_finite_doubles() {
        for bad in ["[1e309]", "[-1e999999]", "[1e-400]", "[0.1e-400]"] {
            assert!(
                matches!(
                    compact(bad.as_bytes(), 32),
                    Err(Unacceptable::NumberOutOfRange(1))
                ),
                "{bad}"
            );
        }
        let long = format!("[1.{}]", "0".repeat(MAX_NUMBER_CHARS));
        assert!(compact(long.as_bytes(), 32).is_err());
        for ok in [
            "[1e308, -1.7e308, 0, 0.0, 0e-400, -0, 5e-324, 123456789012345678901234567890]",
            r#"["1e999"]"#,
            r#"{"a1e999":2}"#,
        ] {
            assert!(compact(ok.as_bytes(), 32).is_ok(), "{ok}");
        }
    }

    #[test]
    fn path_at_names_the_value_at_an_offset() {
        let text = r#"{"args":[1,{"x":[2,1e999]}],"meta":{"a b":"\ud800"}}"#;
        let at = |needle: &str| text.find(needle).unwrap();
        assert_eq!(path_at(text.as_bytes(), at("1e999")), "$.args[1].x[1]");
        assert_eq!(path_at(text.as_bytes(), at("ud800")), r#"$.meta["a b"]"#);
        assert_eq!(path_at(b"[1e999]", 1), "$[0]");
        assert_eq!(path_at(b"1e999", 0), "$");
    }

    #[test]
    fn object_keeps_order_and_last_duplicate() {
        let obj = Object::parse(r#"{"z":1,"a":2,"z":3,"n":null}"#).unwrap();
        let keys: Vec<_> = obj
            .iter()
            .map(|(k, v)| format!("{k}={}", v.get()))
            .collect();
        assert_eq!(keys, ["z=3", "a=2", "n=null"]);
        assert!(obj.get("n").is_none());
        assert!(obj.get_raw("n").is_some());
    }

    #[test]
    fn kinds_and_integers() {
        let obj = Object::parse(r#"{"o":{},"a":[],"s":"x","n":-1.5,"i":42,"b":false}"#).unwrap();
        assert_eq!(Kind::of(obj.get("o").unwrap()), Kind::Object);
        assert_eq!(Kind::of(obj.get("a").unwrap()), Kind::Array);
        assert_eq!(Kind::of(obj.get("s").unwrap()), Kind::String);
        assert_eq!(Kind::of(obj.get("n").unwrap()), Kind::Number);
        assert_eq!(Kind::of(obj.get("b").unwrap()), Kind::Bool);
        assert_eq!(as_integer(obj.get("i").unwrap()), Some(42));
        assert_eq!(as_integer(obj.get("n").unwrap()), None);
        assert_eq!(as_integer(obj.get("s").unwrap()), None);
        let whole = Object::parse(r#"{"f":2.0,"e":1e3,"big":1e300,"neg":-7.0}"#).unwrap();
        assert_eq!(as_integer(whole.get("f").unwrap()), Some(2));
        assert_eq!(as_integer(whole.get("e").unwrap()), Some(1000));
        assert_eq!(as_integer(whole.get("neg").unwrap()), Some(-7));
        assert_eq!(as_integer(whole.get("big").unwrap()), None);
    }

    #[test]
    fn object_text_writes_members_in_order() {
        let obj = Object::parse(r#"{"b":[1],"a\"q":"x"}"#).unwrap();
        assert_eq!(object_text(obj.iter()), r#"{"b":[1],"a\"q":"x"}"#);
        assert_eq!(object_text(std::iter::empty()), "{}");
    }
}
