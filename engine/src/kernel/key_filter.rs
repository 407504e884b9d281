//! A Bloom filter over byte keys, by a hash the caller computes once per key: says "never seen"
//! for certain, "maybe" otherwise. A replay keeps one over every key it spilled (`replay`), and the
//! spill table one per run it wrote (`store::spill`), so a lookup of a key never written reads
//! nothing.

/// The hash keys are filtered (and a replay's held rows found) by: seeded at random per table,
/// as std's maps are per map.
pub(crate) type Hashing = foldhash::fast::RandomState;

/// Bit positions per key.
const PROBES: u64 = 3;

/// The filter's bits.
pub(crate) struct KeyFilter {
    words: Vec<u64>,
    bits: u64,
}

impl KeyFilter {
    /// An empty filter of at least `bits` bits (a whole number of 64-bit words, at least one).
    pub(crate) fn with_bits(bits: usize) -> KeyFilter {
        let words = bits.div_ceil(64).max(1);
        KeyFilter { words: vec![0; words], bits: words as u64 * 64 }
    }

    fn positions(&self, hash: u64) -> impl Iterator<Item = (usize, u64)> {
        let (first, step, bits) = (hash & 0xffff_ffff, (hash >> 32) | 1, self.bits);
        (0..PROBES).map(move |probe| {
            let bit = first.wrapping_add(probe.wrapping_mul(step)) % bits;
            ((bit / 64) as usize, 1u64 << (bit % 64))
        })
    }

    /// Adds the key of `hash`.
    pub(crate) fn insert(&mut self, hash: u64) {
        for (word, mask) in self.positions(hash) {
            self.words[word] |= mask;
        }
    }

    /// Whether the key of `hash` may have been added (`false`: it never was).
    pub(crate) fn may_hold(&self, hash: u64) -> bool {
        self.positions(hash).all(|(word, mask)| self.words[word] & mask != 0)
    }
}

#[cfg(test)]
mod tests {
    use std::hash::BuildHasher;

    use super::*;

    #[test]
    fn every_added_key_may_be_held_and_most_others_are_not() {
        let hashing = Hashing::default();
        let mut filter = KeyFilter::with_bits(10 * 1000);
        for i in 0..1000u32 {
            filter.insert(hashing.hash_one(format!("in-{i}").as_bytes()));
        }
        for i in 0..1000u32 {
            assert!(filter.may_hold(hashing.hash_one(format!("in-{i}").as_bytes())));
        }
        let false_positives = (0..10_000u32)
            .filter(|i| filter.may_hold(hashing.hash_one(format!("out-{i}").as_bytes())))
            .count();
        // 10 bits a key and 3 probes: about 1.7% in theory.
        assert!(false_positives < 500, "{false_positives} of 10000 absent keys passed");
    }

    #[test]
    fn a_filter_has_at_least_one_word() {
        let mut filter = KeyFilter::with_bits(0);
        assert_eq!(filter.words.len(), 1);
        assert!(!filter.may_hold(7));
        filter.insert(7);
        assert!(filter.may_hold(7));
    }
}
