//! Output voting (MISSION.md #12): which bytes of the server stream may go
//! to the client, decided by a majority of the live replicas.
//!
//! Pure logic over what each live replica has offered beyond the point
//! already decided. A replica's offer is its bytes followed, if it closed
//! there, by its FIN; the FIN counts as one more symbol, so a replica that
//! stops early (or goes on) where the majority goes on (or stops) is as
//! divergent as one that sends other bytes.

/// What one live replica offers beyond the decided point.
#[derive(Debug, Clone, Copy)]
pub struct Offer<'a> {
    pub bytes: &'a [u8],
    /// Its FIN follows `bytes` immediately.
    pub fin: bool,
}

impl Offer<'_> {
    /// Symbols: bytes, and the FIN as one more.
    fn len(&self) -> usize {
        self.bytes.len() + self.fin as usize
    }
}

/// The vote's outcome for the symbols right after the decided point.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// No quorum yet, but one may still form when the others send more.
    Wait,
    /// A quorum agrees on the first `len` bytes of offer `from` (and on its
    /// FIN after them if `fin`). `diverged` lists the offers that
    /// contradict them, with the offset of the first differing symbol.
    Decide {
        from: usize,
        len: usize,
        fin: bool,
        diverged: Vec<(usize, usize)>,
    },
    /// No quorum can form on the next symbol: the offers split into
    /// `groups` that agree on it (those that offer nothing are in none).
    Split { groups: Vec<Vec<usize>> },
}

/// Length of the common prefix of two byte strings: 64 bytes at a time
/// (a `memcmp`), then byte by byte inside the block that differs.
pub(crate) fn prefix(a: &[u8], b: &[u8]) -> usize {
    const BLOCK: usize = 64;
    let n = a.len().min(b.len());
    let mut i = 0;
    while i + BLOCK <= n && a[i..i + BLOCK] == b[i..i + BLOCK] {
        i += BLOCK;
    }
    i + a[i..n]
        .iter()
        .zip(&b[i..n])
        .position(|(x, y)| x != y)
        .unwrap_or(n - i)
}

/// Common prefix of two offers in symbols.
fn common(a: &Offer, b: &Offer) -> usize {
    let c = prefix(a.bytes, b.bytes);
    if c == a.bytes.len() && c == b.bytes.len() && a.fin && b.fin {
        c + 1
    } else {
        c
    }
}

/// Decide what `quorum` of the `offers` agree on.
///
/// For each offer, the longest prefix that at least `quorum` offers
/// (itself included) share; the longest such prefix wins. A prefix with a
/// quorum is unique, because two quorums of a majority overlap.
pub fn decide(offers: &[Offer], quorum: usize) -> Outcome {
    let quorum = quorum.max(1);
    // Common prefixes, each pair compared once; an offer with itself is
    // its length (compared, a replica far ahead of the others cost a scan
    // of all it offered at every packet: 79 % of the router's time on a
    // voted download).
    let n = offers.len();
    let mut cp = vec![0usize; n * n];
    for j in 0..n {
        cp[j * n + j] = offers[j].len();
        for k in j + 1..n {
            let c = common(&offers[j], &offers[k]);
            cp[j * n + k] = c;
            cp[k * n + j] = c;
        }
    }
    let mut best: Option<(usize, usize, Vec<usize>)> = None;
    for (j, a) in offers.iter().enumerate() {
        if a.len() == 0 {
            continue;
        }
        let row = cp[j * n..(j + 1) * n].to_vec();
        let mut cps = row.clone();
        cps.sort_unstable_by(|x, y| y.cmp(x));
        let x = cps.get(quorum - 1).copied().unwrap_or(0);
        if x > 0 && best.as_ref().is_none_or(|b| x > b.1) {
            best = Some((j, x, row));
        }
    }
    if let Some((from, x, row)) = best {
        let blen = offers[from].bytes.len();
        let diverged = row
            .iter()
            .enumerate()
            .filter(|&(k, &c)| c < x.min(offers[k].len()))
            .map(|(k, &c)| (k, c))
            .collect();
        return Outcome::Decide {
            from,
            len: x.min(blen),
            fin: x > blen,
            diverged,
        };
    }
    // Nothing has a quorum on the first symbol. Group the offers by it; the
    // silent ones could still join any group.
    let mut groups: Vec<(Option<u8>, Vec<usize>)> = Vec::new();
    let mut silent = 0;
    for (k, o) in offers.iter().enumerate() {
        let sym = match (o.bytes.first(), o.fin) {
            (Some(b), _) => Some(*b),
            (None, true) => None,
            (None, false) => {
                silent += 1;
                continue;
            }
        };
        match groups.iter_mut().find(|g| g.0 == sym) {
            Some(g) => g.1.push(k),
            None => groups.push((sym, vec![k])),
        }
    }
    let largest = groups.iter().map(|g| g.1.len()).max().unwrap_or(0);
    if largest + silent >= quorum {
        Outcome::Wait
    } else {
        Outcome::Split {
            groups: groups.into_iter().map(|g| g.1).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn o(b: &[u8]) -> Offer<'_> {
        Offer {
            bytes: b,
            fin: false,
        }
    }
    fn f(b: &[u8]) -> Offer<'_> {
        Offer {
            bytes: b,
            fin: true,
        }
    }

    #[test]
    fn two_of_three_agree_the_third_is_named() {
        let r = decide(&[o(b"hello"), o(b"hellx!"), o(b"hello world")], 2);
        assert_eq!(
            r,
            Outcome::Decide {
                from: 0,
                len: 5,
                fin: false,
                diverged: vec![(1, 4)]
            }
        );
    }

    #[test]
    fn waits_for_the_slowest_when_the_fast_ones_disagree() {
        assert_eq!(decide(&[o(b"a"), o(b"b"), o(b"")], 2), Outcome::Wait);
        // The third breaks the tie.
        match decide(&[o(b"a"), o(b"b"), o(b"b")], 2) {
            Outcome::Decide {
                from,
                len,
                diverged,
                ..
            } => {
                assert_eq!((from, len), (1, 1));
                assert_eq!(diverged, vec![(0, 0)]);
            }
            r => panic!("{r:?}"),
        }
    }

    #[test]
    fn a_shorter_agreeing_offer_is_not_divergent() {
        let r = decide(&[o(b"abcdef"), o(b"abcdef"), o(b"ab")], 2);
        assert_eq!(
            r,
            Outcome::Decide {
                from: 0,
                len: 6,
                fin: false,
                diverged: vec![]
            }
        );
    }

    #[test]
    fn no_quorum_no_bytes() {
        // A single fast replica decides nothing at N = 3.
        assert_eq!(decide(&[o(b"abc"), o(b""), o(b"")], 2), Outcome::Wait);
        // At N = 2 both must agree.
        assert_eq!(decide(&[o(b"abc"), o(b"ab")], 2), {
            Outcome::Decide {
                from: 0,
                len: 2,
                fin: false,
                diverged: vec![],
            }
        });
    }

    #[test]
    fn fin_is_a_symbol() {
        // Two close after "ok", one goes on: the FIN is decided, the third
        // diverges where the others closed.
        let r = decide(&[f(b"ok"), f(b"ok"), o(b"ok, and more")], 2);
        assert_eq!(
            r,
            Outcome::Decide {
                from: 0,
                len: 2,
                fin: true,
                diverged: vec![(2, 2)]
            }
        );
        // One closes early: the majority's bytes win.
        let r = decide(&[f(b"o"), o(b"ok"), o(b"ok")], 2);
        assert_eq!(
            r,
            Outcome::Decide {
                from: 1,
                len: 2,
                fin: false,
                diverged: vec![(0, 1)]
            }
        );
    }

    #[test]
    fn split_is_reported_only_when_no_quorum_can_form() {
        match decide(&[o(b"a"), o(b"b")], 2) {
            Outcome::Split { groups } => assert_eq!(groups, vec![vec![0], vec![1]]),
            r => panic!("{r:?}"),
        }
        match decide(&[o(b"a"), o(b"b"), o(b"c")], 2) {
            Outcome::Split { groups } => assert_eq!(groups.len(), 3),
            r => panic!("{r:?}"),
        }
        match decide(&[f(b""), o(b"x")], 2) {
            Outcome::Split { groups } => assert_eq!(groups, vec![vec![0], vec![1]]),
            r => panic!("{r:?}"),
        }
        assert_eq!(decide(&[o(b"a"), o(b"b"), o(b"")], 2), Outcome::Wait);
    }

    #[test]
    fn a_single_replica_decides_alone() {
        let r = decide(&[f(b"xyz")], 1);
        assert_eq!(
            r,
            Outcome::Decide {
                from: 0,
                len: 3,
                fin: true,
                diverged: vec![]
            }
        );
        assert_eq!(decide(&[o(b"")], 1), Outcome::Wait);
    }

    proptest::proptest! {
        /// The block-wise prefix is the byte-wise one, wherever the first
        /// difference falls (inside a block, on its edge, in the tail).
        #[test]
        fn the_common_prefix_is_found_wherever_the_bytes_differ(
            len in 0usize..400,
            at in 0usize..400,
            cut in 0usize..400,
        ) {
            let a: Vec<u8> = (0..len).map(|x| (x * 7 + 3).to_le_bytes()[0]).collect();
            let mut b = a.clone();
            if at < len {
                b[at] ^= 0x5a;
            }
            b.truncate(cut.max(at.min(len)));
            let naive = a.iter().zip(&b).position(|(x, y)| x != y).unwrap_or(a.len().min(b.len()));
            proptest::prop_assert_eq!(prefix(&a, &b), naive);
            proptest::prop_assert_eq!(prefix(&b, &a), naive);
        }
    }
}
