//! The names `log --domain` and `--kind` accept: every domain and every event kind, read from
//! the schema's own enums, so a filter that names nothing real is refused instead of matching
//! nothing.
//!
//! The names come from serde: each event enum hands its variant names to the deserializer it
//! is asked to decode from, and a kind is its variant's name in snake case (as `kind()` spells
//! it; a test holds the two together). Does not read a store.

use std::fmt;

use hookstate_schema::alerts::AlertsEvent;
use hookstate_schema::heartbeat::HeartbeatEvent;
use hookstate_schema::observer::ObserverEvent;
use hookstate_schema::proposals::ProposalsEvent;
use hookstate_schema::session::SessionEvent;
use hookstate_schema::signals::SignalsEvent;
use hookstate_schema::{Body, CoreEvent, FeedbackEvent};
use serde::de::{self, Deserialize, Visitor};

use crate::kernel::error::{Error, Result};

/// A deserializer that decodes nothing: it only keeps the variant names an enum asks for.
struct VariantNames {
    names: &'static [&'static str],
}

#[derive(Debug)]
struct Stop;

impl fmt::Display for Stop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("variant names only")
    }
}

impl std::error::Error for Stop {}

impl de::Error for Stop {
    fn custom<T: fmt::Display>(_: T) -> Self {
        Stop
    }
}

impl<'de> de::Deserializer<'de> for &mut VariantNames {
    type Error = Stop;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> std::result::Result<V::Value, Stop> {
        Err(Stop)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _: &'static str,
        variants: &'static [&'static str],
        _: V,
    ) -> std::result::Result<V::Value, Stop> {
        self.names = variants;
        Err(Stop)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map struct identifier
        ignored_any
    }
}

/// The variant names of the enum `T`, as its derived `Deserialize` declares them.
fn variant_names<'de, T: Deserialize<'de>>() -> &'static [&'static str] {
    let mut grab = VariantNames { names: &[] };
    let _ = T::deserialize(&mut grab);
    grab.names
}

/// `RecordPut` → `record_put`.
pub(crate) fn snake_case(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 4);
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// Every domain, in [`Body`] variant order.
pub(crate) fn domains() -> Vec<String> {
    variant_names::<Body>().iter().map(|n| snake_case(n)).collect()
}

/// The event kinds of `domain`; `None` for a name that is no domain.
pub(crate) fn kinds_of(domain: &str) -> Option<Vec<String>> {
    let names = match domain {
        "core" => variant_names::<CoreEvent>(),
        "signals" => variant_names::<SignalsEvent>(),
        "observer" => variant_names::<ObserverEvent>(),
        "feedback" => variant_names::<FeedbackEvent>(),
        "proposals" => variant_names::<ProposalsEvent>(),
        "alerts" => variant_names::<AlertsEvent>(),
        "heartbeat" => variant_names::<HeartbeatEvent>(),
        "session" => variant_names::<SessionEvent>(),
        _ => return None,
    };
    Some(names.iter().map(|n| snake_case(n)).collect())
}

/// Refuses a `--domain` that is no domain, and a `--kind` that is no kind (of that domain, when
/// one is given; of any, otherwise).
///
/// # Errors
/// [`Error::BadInput`] naming the names that would match.
pub(crate) fn check_filter(domain: Option<&str>, kind: Option<&str>) -> Result<()> {
    let domains = domains();
    if let Some(domain) = domain {
        if !domains.iter().any(|d| d == domain) {
            return Err(Error::BadInput {
                what: format!("--domain {domain:?}"),
                why: format!("is no domain (one of {})", domains.join(", ")),
            });
        }
    }
    let Some(kind) = kind else {
        return Ok(());
    };
    let searched: Vec<String> = domain.map_or(domains, |d| vec![d.to_owned()]);
    let known = searched.iter().filter_map(|d| kinds_of(d)).flatten().collect::<Vec<_>>();
    if known.iter().any(|k| k == kind) {
        return Ok(());
    }
    let why = match domain {
        Some(domain) => format!("is no kind of domain {domain} (one of {})", known.join(", ")),
        None => {
            let by_domain = self::domains()
                .iter()
                .map(|d| format!("{d}: {}", kinds_of(d).unwrap_or_default().join(" ")))
                .collect::<Vec<_>>();
            format!("is no event kind ({})", by_domain.join("; "))
        }
    };
    Err(Error::BadInput { what: format!("--kind {kind:?}"), why })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn domains_are_the_body_variants_as_body_domain_spells_them() {
        let body = Body::Core(CoreEvent::SetAdded { set: "s".into(), member: "m".into() });
        assert_eq!(domains()[body.variant_index()], body.domain());
        assert_eq!(
            domains(),
            [
                "core",
                "signals",
                "observer",
                "feedback",
                "proposals",
                "alerts",
                "heartbeat",
                "session"
            ]
        );
        for domain in domains() {
            assert!(kinds_of(&domain).is_some_and(|k| !k.is_empty()), "{domain} has no kinds");
        }
    }

    #[test]
    fn core_kinds_are_what_kind_spells() {
        let kinds = kinds_of("core").unwrap();
        assert_eq!(kinds.len(), 11);
        let event = CoreEvent::ItemRedriven { queue: "q".into(), item: "i".into() };
        assert!(kinds.iter().any(|k| k == event.kind()));
        assert_eq!(kinds[0], "record_put");
    }

    #[test]
    fn unknown_names_are_refused_and_known_ones_pass() {
        assert!(check_filter(Some("core"), Some("record_put")).is_ok());
        assert!(check_filter(None, Some("turn_signaled")).is_ok());
        assert!(check_filter(None, None).is_ok());
        let err = check_filter(Some("cor"), None).unwrap_err().to_string();
        assert!(err.contains("is no domain") && err.contains("core"), "{err}");
        let err = check_filter(Some("core"), Some("turn_signaled")).unwrap_err().to_string();
        assert!(err.contains("no kind of domain core"), "{err}");
        assert!(check_filter(None, Some("record_putt")).is_err());
    }
}
