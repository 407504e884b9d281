//! The events appended per domain since genesis, kept in one metadata value that every commit
//! moves, so `metrics` answers without walking the log.
//!
//! A store made before the count was kept has no value; the write path then leaves it absent
//! (a count from the middle of the log would be wrong) until `rebuild` or a restore sets it
//! from a full walk. Does not know the domains' names; they are the body variants' order.

use hookstate_schema::format::META_DOMAIN_EVENTS;
use hookstate_schema::{Body, BODY_VARIANTS};

use crate::kernel::error::Result;
use crate::kernel::storage::{ReadTxn, WriteTxn};

/// Events per body variant, in `Body::variant_index` order.
pub(crate) type Counts = [u64; BODY_VARIANTS];

/// Bytes of one count in the stored value.
const COUNT_BYTES: usize = 8;

/// Decodes the stored value; a shorter one (from a build with fewer domains) counts the rest as
/// 0, a longer one keeps what this build knows.
pub(crate) fn decode(bytes: &[u8]) -> Counts {
    let mut out = [0u64; BODY_VARIANTS];
    for (slot, chunk) in out.iter_mut().zip(bytes.chunks_exact(COUNT_BYTES)) {
        let mut be = [0u8; COUNT_BYTES];
        be.copy_from_slice(chunk);
        *slot = u64::from_be_bytes(be);
    }
    out
}

/// Encodes counts for the metadata value.
pub(crate) fn encode(counts: &Counts) -> Vec<u8> {
    counts.iter().flat_map(|c| c.to_be_bytes()).collect()
}

/// The stored counts, when the store keeps them.
///
/// # Errors
/// Store errors.
pub(crate) fn read(txn: &dyn ReadTxn) -> Result<Option<Counts>> {
    Ok(txn.meta(META_DOMAIN_EVENTS)?.map(|bytes| decode(&bytes)))
}

/// Adds `bodies` to the stored counts, when the store keeps them.
///
/// # Errors
/// Store errors.
pub(crate) fn add<'a>(
    txn: &mut dyn WriteTxn,
    bodies: impl Iterator<Item = &'a Body>,
) -> Result<()> {
    let Some(mut counts) = read(txn)? else {
        return Ok(());
    };
    for body in bodies {
        counts[body.variant_index()] = counts[body.variant_index()].saturating_add(1);
    }
    txn.put_meta(META_DOMAIN_EVENTS, &encode(&counts))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_round_trip_and_a_short_value_pads_with_zeros() {
        let mut counts = [0u64; BODY_VARIANTS];
        counts[0] = 5;
        counts[BODY_VARIANTS - 1] = u64::MAX;
        assert_eq!(decode(&encode(&counts)), counts);
        assert_eq!(decode(&7u64.to_be_bytes())[0], 7);
        assert_eq!(decode(&7u64.to_be_bytes())[1], 0);
    }
}
