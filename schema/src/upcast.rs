//! Event shape versions and the upcasters that read old shapes: the one place where an event
//! body written by an older build becomes the shape this build's code matches on.
//!
//! Every event kind has a shape version, 1 unless [`Shaped`] says more. A versioned kind's
//! stored fields carry it as `v` (absent: version 1, the bytes every build before shape versions
//! wrote). Decoding reads the stored fields generically ([`Fields`]), runs the registered
//! upcasters from the stored version to the current one ([`UPCASTERS`], one per kind and old
//! version), then decodes the current shape, which refuses any field left over. Hashes cover
//! the stored bytes, so upcasting never touches the chain. Does not do IO or encode records;
//! `format.rs` does.

use serde::de::{self, DeserializeOwned, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{SerializeMap, SerializeSeq, Serializer};
use serde::{Deserialize, Serialize};

/// The name of the shape version among a versioned kind's stored fields.
pub const VERSION_FIELD: &str = "v";

/// An event body type whose shape changed at least once: its kind and its current version.
pub trait Shaped: Serialize + DeserializeOwned {
    /// The domain, as `hookstate log --domain` names it.
    const DOMAIN: &'static str;
    /// The kind, as `hookstate log --kind` names it.
    const KIND: &'static str;
    /// The shape this build writes and its code reads.
    const VERSION: u16;
}

/// One upcaster: turns the stored fields of `domain.kind` at shape `from` into shape `from + 1`.
#[derive(Debug, Clone, Copy)]
pub struct Upcaster {
    /// The kind's domain.
    pub domain: &'static str,
    /// The kind.
    pub kind: &'static str,
    /// The shape it reads; it writes the next one.
    pub from: u16,
    /// The change, or why these fields cannot be read as shape `from`.
    pub upcast: fn(Fields) -> Result<Fields, String>,
}

/// Every upcaster, one per kind and old version. Removing one makes the stored events of that
/// shape undecodable (the golden-bytes tests in `format.rs` pin it).
pub const UPCASTERS: &[Upcaster] = &[Upcaster {
    domain: "proposals",
    kind: "micro_queued",
    from: 1,
    upcast: crate::proposals::micro_queued_v1_to_v2,
}];

/// The upcaster of `domain.kind` from shape `from`, if one is registered.
#[must_use]
pub fn upcaster(domain: &str, kind: &str, from: u16) -> Option<&'static Upcaster> {
    UPCASTERS.iter().find(|u| u.domain == domain && u.kind == kind && u.from == from)
}

/// A MessagePack (or JSON) value, read without knowing its type: what upcasters work on.
#[derive(Debug, Clone, PartialEq)]
pub enum Wire {
    /// nil / null.
    Nil,
    /// A boolean.
    Bool(bool),
    /// A negative integer.
    Int(i64),
    /// A non-negative integer.
    Uint(u64),
    /// A float.
    Float(f64),
    /// A string.
    Str(String),
    /// A byte string.
    Bin(Vec<u8>),
    /// An array.
    Array(Vec<Wire>),
    /// A map, in stored order.
    Map(Vec<(Wire, Wire)>),
}

/// The stored fields of one event body, by name, in stored order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Fields(pub Vec<(String, Wire)>);

impl Fields {
    /// Removes a field and returns its value.
    pub fn take(&mut self, name: &str) -> Option<Wire> {
        let index = self.0.iter().position(|(key, _)| key == name)?;
        Some(self.0.remove(index).1)
    }

    /// Sets a field in place, or appends it.
    pub fn set(&mut self, name: &str, value: Wire) {
        match self.0.iter_mut().find(|(key, _)| key == name) {
            Some(slot) => slot.1 = value,
            None => self.0.push((name.to_owned(), value)),
        }
    }

    /// Removes the shape version: 1 when absent.
    ///
    /// # Errors
    /// When `v` is not an integer in `1..=u16::MAX`.
    pub fn take_version(&mut self) -> Result<u16, String> {
        match self.take(VERSION_FIELD) {
            None => Ok(1),
            Some(Wire::Uint(v)) if v >= 1 => {
                u16::try_from(v).map_err(|_| format!("shape version {v} is out of range"))
            }
            Some(other) => Err(format!("shape version {other:?} is not a positive integer")),
        }
    }

    /// Decodes the fields as `T` (a current shape, or an old one an upcaster reads).
    ///
    /// # Errors
    /// The decoder's message, e.g. for a missing or unknown field.
    pub fn decode<T: DeserializeOwned>(&self) -> Result<T, String> {
        let bytes = rmp_serde::to_vec_named(self).map_err(|e| e.to_string())?;
        rmp_serde::from_slice(&bytes).map_err(|e| e.to_string())
    }

    /// The fields of `value` (a struct).
    ///
    /// # Errors
    /// When `value` does not encode as a map with string keys.
    pub fn encode<T: Serialize>(value: &T) -> Result<Fields, String> {
        let bytes = rmp_serde::to_vec_named(value).map_err(|e| e.to_string())?;
        rmp_serde::from_slice(&bytes).map_err(|e| e.to_string())
    }
}

/// Runs the upcasters from the stored shape of `fields` to `T`'s current one and decodes it.
///
/// # Errors
/// A shape newer than this build, a missing upcaster, or fields that are not the shape they
/// claim to be.
pub fn upcast<T: Shaped>(mut fields: Fields) -> Result<T, String> {
    let (domain, kind) = (T::DOMAIN, T::KIND);
    let mut version = fields.take_version()?;
    if version > T::VERSION {
        return Err(format!(
            "{domain}.{kind} shape {version} is newer than this build ({})",
            T::VERSION
        ));
    }
    while version < T::VERSION {
        let step = upcaster(domain, kind, version)
            .ok_or_else(|| format!("no upcaster of {domain}.{kind} from shape {version}"))?;
        fields = (step.upcast)(fields)
            .map_err(|why| format!("{domain}.{kind} shape {version}: {why}"))?;
        version += 1;
    }
    fields.decode()
}

/// `serialize_with` of a versioned kind's variant: its fields, led by `v`.
///
/// # Errors
/// The serializer's.
pub fn serialize<T: Shaped, S: Serializer>(value: &T, serializer: S) -> Result<S::Ok, S::Error> {
    #[derive(Serialize)]
    struct Tagged<'a, T> {
        v: u16,
        #[serde(flatten)]
        fields: &'a T,
    }
    Tagged { v: T::VERSION, fields: value }.serialize(serializer)
}

/// `deserialize_with` of a versioned kind's variant: the stored fields, upcast.
///
/// # Errors
/// The deserializer's, or [`upcast`]'s as a custom error.
pub fn deserialize<'de, T: Shaped, D: Deserializer<'de>>(deserializer: D) -> Result<T, D::Error> {
    let fields = Fields::deserialize(deserializer)?;
    upcast(fields).map_err(de::Error::custom)
}

impl Serialize for Wire {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Wire::Nil => serializer.serialize_unit(),
            Wire::Bool(b) => serializer.serialize_bool(*b),
            Wire::Int(i) => serializer.serialize_i64(*i),
            Wire::Uint(u) => serializer.serialize_u64(*u),
            Wire::Float(f) => serializer.serialize_f64(*f),
            Wire::Str(s) => serializer.serialize_str(s),
            Wire::Bin(b) => serializer.serialize_bytes(b),
            Wire::Array(items) => {
                let mut seq = serializer.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(item)?;
                }
                seq.end()
            }
            Wire::Map(entries) => {
                let mut map = serializer.serialize_map(Some(entries.len()))?;
                for (key, value) in entries {
                    map.serialize_entry(key, value)?;
                }
                map.end()
            }
        }
    }
}

impl Serialize for Fields {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (key, value) in &self.0 {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

struct WireVisitor;

impl<'de> Visitor<'de> for WireVisitor {
    type Value = Wire;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a MessagePack value")
    }
    fn visit_unit<E>(self) -> Result<Wire, E> {
        Ok(Wire::Nil)
    }
    fn visit_none<E>(self) -> Result<Wire, E> {
        Ok(Wire::Nil)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Wire, D::Error> {
        Wire::deserialize(d)
    }
    fn visit_bool<E>(self, b: bool) -> Result<Wire, E> {
        Ok(Wire::Bool(b))
    }
    fn visit_i64<E>(self, i: i64) -> Result<Wire, E> {
        Ok(u64::try_from(i).map_or(Wire::Int(i), Wire::Uint))
    }
    fn visit_u64<E>(self, u: u64) -> Result<Wire, E> {
        Ok(Wire::Uint(u))
    }
    fn visit_f64<E>(self, f: f64) -> Result<Wire, E> {
        Ok(Wire::Float(f))
    }
    fn visit_str<E>(self, s: &str) -> Result<Wire, E> {
        Ok(Wire::Str(s.to_owned()))
    }
    fn visit_string<E>(self, s: String) -> Result<Wire, E> {
        Ok(Wire::Str(s))
    }
    fn visit_bytes<E>(self, b: &[u8]) -> Result<Wire, E> {
        Ok(Wire::Bin(b.to_vec()))
    }
    fn visit_byte_buf<E>(self, b: Vec<u8>) -> Result<Wire, E> {
        Ok(Wire::Bin(b))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Wire, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Wire::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Wire, A::Error> {
        let mut entries = Vec::new();
        while let Some(entry) = map.next_entry()? {
            entries.push(entry);
        }
        Ok(Wire::Map(entries))
    }
}

impl<'de> Deserialize<'de> for Wire {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Wire, D::Error> {
        deserializer.deserialize_any(WireVisitor)
    }
}

impl<'de> Deserialize<'de> for Fields {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Fields, D::Error> {
        let Wire::Map(entries) = Wire::deserialize(deserializer)? else {
            return Err(de::Error::custom("an event body's fields are not a map"));
        };
        entries
            .into_iter()
            .map(|(key, value)| match key {
                Wire::Str(name) => Ok((name, value)),
                other => Err(de::Error::custom(format!("field name {other:?} is not a string"))),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Fields)
    }
}

/// Where `body` is among the fields of `EventContent` (`at_ms, actor, scope, idem_key, body,
/// request`): a positional content holds it at this index.
pub const CONTENT_BODY_INDEX: usize = 4;

/// The shape version the body of an encoded event content is stored at: its `v`, 1 when
/// absent. It skims the content (every other value is skipped, not built), so the record
/// version check costs a versioned kind little. The content is positional (an array, written
/// since 2026-12-02) or named (a map, written before).
///
/// # Errors
/// When the content holds no body of one domain and one kind.
pub fn stored_version(content_bytes: &[u8]) -> Result<u16, String> {
    let skim: ContentSkim =
        rmp_serde::from_slice(content_bytes).map_err(|e| format!("skimming for v: {e}"))?;
    skim.0.ok_or_else(|| "no body of one domain and one kind".to_owned())
}

/// The `v` of the body of a content map (`None`: no body).
struct ContentSkim(Option<u16>);
/// A map of one entry, whose value is skimmed by `Inner`; a bare string (a kind without fields)
/// is shape 1.
#[derive(Clone, Copy)]
struct OneOf<Inner>(Inner);
/// The `v` among a kind's fields.
#[derive(Clone, Copy)]
struct VersionSkim;

impl<'de> Deserialize<'de> for ContentSkim {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ContentSkim;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an event content (an array or a map)")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ContentSkim, A::Error> {
                let mut found = None;
                while let Some(key) = map.next_key::<String>()? {
                    if key == "body" {
                        found = Some(map.next_value_seed(OneOf(OneOf(VersionSkim)))?);
                    } else {
                        map.next_value::<de::IgnoredAny>()?;
                    }
                }
                Ok(ContentSkim(found))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<ContentSkim, A::Error> {
                for _ in 0..CONTENT_BODY_INDEX {
                    if seq.next_element::<de::IgnoredAny>()?.is_none() {
                        return Ok(ContentSkim(None));
                    }
                }
                let found = seq.next_element_seed(OneOf(OneOf(VersionSkim)))?;
                while seq.next_element::<de::IgnoredAny>()?.is_some() {}
                Ok(ContentSkim(found))
            }
        }
        d.deserialize_any(V)
    }
}

impl<'de, Inner: de::DeserializeSeed<'de, Value = u16> + Copy> de::DeserializeSeed<'de>
    for OneOf<Inner>
{
    type Value = u16;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<u16, D::Error> {
        struct V<Inner>(Inner);
        impl<'de, Inner: de::DeserializeSeed<'de, Value = u16> + Copy> Visitor<'de> for V<Inner> {
            type Value = u16;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a map of one entry, or a bare variant name")
            }
            fn visit_str<E>(self, _: &str) -> Result<u16, E> {
                Ok(1)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<u16, A::Error> {
                if map.next_key::<de::IgnoredAny>()?.is_none() {
                    return Err(de::Error::custom("an empty map"));
                }
                let version = map.next_value_seed(self.0)?;
                if map.next_key::<de::IgnoredAny>()?.is_some() {
                    return Err(de::Error::custom("a map of more than one entry"));
                }
                Ok(version)
            }
        }
        d.deserialize_any(V(self.0))
    }
}

impl<'de> de::DeserializeSeed<'de> for VersionSkim {
    type Value = u16;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<u16, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = u16;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a kind's fields")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<u16, A::Error> {
                let mut version = 1;
                while let Some(key) = map.next_key::<String>()? {
                    if key == VERSION_FIELD {
                        version = map.next_value()?;
                    } else {
                        map.next_value::<de::IgnoredAny>()?;
                    }
                }
                Ok(version)
            }
            // A kind whose fields are not a map (a newtype of a non-struct) is shape 1.
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<u16, A::Error> {
                while seq.next_element::<de::IgnoredAny>()?.is_some() {}
                Ok(1)
            }
            fn visit_str<E>(self, _: &str) -> Result<u16, E> {
                Ok(1)
            }
            fn visit_u64<E>(self, _: u64) -> Result<u16, E> {
                Ok(1)
            }
            fn visit_i64<E>(self, _: i64) -> Result<u16, E> {
                Ok(1)
            }
            fn visit_bool<E>(self, _: bool) -> Result<u16, E> {
                Ok(1)
            }
            fn visit_unit<E>(self) -> Result<u16, E> {
                Ok(1)
            }
        }
        d.deserialize_any(V)
    }
}
