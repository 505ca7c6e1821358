//! How big a JSON value is: its nesting and its bytes of compact JSON, counted without recursion
//! and without serializing, stopping at the first excess. Input shape limits, schema size limits
//! and the output cap all count with [`measure`].

use std::fmt;

use serde_json::Value;

/// The limit a JSON value broke in [`measure`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Exceeded {
    /// Arrays and objects nested deeper than allowed.
    Depth,
    /// More bytes of compact JSON than allowed.
    Size,
}

/// Checks, without recursion and stopping at the first excess, that `value` nests at most
/// `max_depth` arrays and objects and serializes to at most `max_bytes` bytes of compact JSON
/// (computed as `serde_json` would write it, without writing it).
pub(crate) fn measure(value: &Value, max_depth: usize, max_bytes: usize) -> Result<(), Exceeded> {
    /// An open container and the children not yet visited.
    enum Frame<'a> {
        Array(std::slice::Iter<'a, Value>),
        Object(serde_json::map::Iter<'a>),
    }

    // Fast path for the common flat object of scalars, in one pass and with no stack to allocate;
    // the first nested container sends the value down the general path.
    if let Value::Object(map) = value
        && max_depth >= 1
        && let Some(flat) = flat_object(map, max_bytes)
    {
        return flat;
    }

    let mut size = 0usize;
    let mut stack: Vec<Frame<'_>> = Vec::with_capacity(8);
    let mut next = Some(value);
    loop {
        if let Some(value) = next.take() {
            size += match value {
                Value::Null => 4,
                Value::Bool(true) => 4,
                Value::Bool(false) => 5,
                Value::Number(n) => number_len(n),
                Value::String(s) => string_len(s, max_bytes.saturating_sub(size)),
                Value::Array(items) => {
                    if stack.len() >= max_depth {
                        return Err(Exceeded::Depth);
                    }
                    stack.push(Frame::Array(items.iter()));
                    // Brackets and commas.
                    2 + items.len().saturating_sub(1)
                }
                Value::Object(map) => {
                    if stack.len() >= max_depth {
                        return Err(Exceeded::Depth);
                    }
                    stack.push(Frame::Object(map.iter()));
                    // Braces, commas and colons.
                    2 + map.len().saturating_sub(1) + map.len()
                }
            };
        }
        if size > max_bytes {
            return Err(Exceeded::Size);
        }
        match stack.last_mut() {
            None => return Ok(()),
            Some(Frame::Array(items)) => match items.next() {
                Some(item) => next = Some(item),
                None => drop(stack.pop()),
            },
            Some(Frame::Object(entries)) => match entries.next() {
                Some((key, item)) => {
                    size += string_len(key, max_bytes.saturating_sub(size));
                    next = Some(item);
                }
                None => drop(stack.pop()),
            },
        }
    }
}

/// The length of `s` as a JSON string literal, or anything over `budget` once it is clear that
/// the string does not fit.
fn string_len(s: &str, budget: usize) -> usize {
    if s.len() + 2 > budget {
        return s.len() + 2;
    }
    let escapes: usize = s
        .bytes()
        .map(|b| match b {
            b'"' | b'\\' | b'\n' | b'\r' | b'\t' | 0x08 | 0x0c => 1,
            0x00..=0x1f => 5,
            _ => 0,
        })
        .sum();
    s.len() + 2 + escapes
}

/// [`measure`] of an object whose members are all scalars; `None` as soon as a member is an
/// array or an object (measured by the general path, from the start).
fn flat_object(map: &serde_json::Map<String, Value>, max_bytes: usize) -> Option<Result<(), Exceeded>> {
    // An upper bound first, without looking inside strings (a byte is at most six in JSON,
    // `\u00XX`): an object well under the limit, the usual case, is done in one cheap pass.
    let mut bound = 2 + 2 * map.len();
    for (key, item) in map {
        bound = bound.saturating_add(match item {
            Value::Array(_) | Value::Object(_) => return None,
            Value::Null | Value::Bool(_) => 5,
            Value::Number(n) => number_len_bound(n),
            Value::String(s) => s.len().saturating_mul(6).saturating_add(2),
        });
        bound = bound.saturating_add(key.len().saturating_mul(6).saturating_add(2));
    }
    if bound <= max_bytes {
        return Some(Ok(()));
    }
    let mut size = 2 + map.len().saturating_sub(1) + map.len();
    for (key, item) in map {
        size += match item {
            Value::Array(_) | Value::Object(_) => return None,
            Value::Null | Value::Bool(true) => 4,
            Value::Bool(false) => 5,
            Value::Number(n) => number_len(n),
            Value::String(s) => string_len(s, max_bytes.saturating_sub(size)),
        };
        size += string_len(key, max_bytes.saturating_sub(size));
        if size > max_bytes {
            return Some(Err(Exceeded::Size));
        }
    }
    Some(Ok(()))
}

/// The number of decimal digits of `n`.
fn digits(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |d| d as usize + 1)
}

/// At least the length of a number as `serde_json` displays it: an integer (`u64` or `i64`) is at
/// most 20 characters; a float is counted.
fn number_len_bound(n: &serde_json::Number) -> usize {
    if n.is_f64() { number_len(n) } else { 20 }
}

/// The length of a number as `serde_json` displays it, without allocating.
fn number_len(n: &serde_json::Number) -> usize {
    // Integers (the common case) are counted arithmetically; floats go through `Display`.
    if let Some(u) = n.as_u64() {
        return digits(u);
    }
    if let Some(i) = n.as_i64() {
        return 1 + digits(i.unsigned_abs());
    }
    /// A writer that only counts bytes.
    struct Count(usize);
    impl fmt::Write for Count {
        fn write_str(&mut self, s: &str) -> fmt::Result {
            self.0 += s.len();
            Ok(())
        }
    }
    let mut count = Count(0);
    // Writing to `Count` cannot fail.
    let _ = fmt::write(&mut count, format_args!("{n}"));
    count.0
}
