//! One wildcard matcher for names: `*` any run of bytes, `?` one byte, anything else itself.
//! The environment policy matches variable names with it (ignoring ASCII case), the sandbox
//! the names a `none` glob hides (exactly).
//!
//! Linear backtracking (a `*` remembers where it started and takes one more byte on a
//! mismatch), so a pattern a client sends costs at most pattern × name steps, never the
//! exponential time of naive recursion over `*`s.

/// Whether letters must match in case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Case {
    Exact,
    IgnoreAscii,
}

pub(crate) fn matches(pattern: &[u8], name: &[u8], case: Case) -> bool {
    let same = |p: u8, n: u8| match case {
        Case::Exact => p == n,
        Case::IgnoreAscii => p.eq_ignore_ascii_case(&n),
    };
    let (mut p, mut n) = (0, 0);
    let mut backtrack: Option<(usize, usize)> = None;
    while n < name.len() {
        match pattern.get(p) {
            Some(b'*') => {
                backtrack = Some((p, n));
                p += 1;
            }
            Some(&c) if c == b'?' || same(c, name[n]) => {
                p += 1;
                n += 1;
            }
            _ => match backtrack {
                Some((star, matched)) => {
                    p = star + 1;
                    n = matched + 1;
                    backtrack = Some((star, matched + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stars_and_question_marks() {
        for case in [Case::Exact, Case::IgnoreAscii] {
            assert!(matches(b"*.key", b"a.key", case));
            assert!(matches(b"?.key", b"a.key", case));
            assert!(!matches(b"?.key", b"ab.key", case));
            assert!(matches(b"*", b"", case));
            assert!(!matches(b"*.key", b"a.keys", case));
            assert!(!matches(b"X*", b"YX", case));
            assert!(!matches(b"A?C", b"ABBC", case));
        }
        assert!(matches(b"*KEY*", b"my_api_key", Case::IgnoreAscii));
        assert!(matches(b"A?C", b"abc", Case::IgnoreAscii));
        assert!(!matches(b"A?C", b"abbc", Case::IgnoreAscii));
        assert!(!matches(b"*KEY*", b"my_api_key", Case::Exact));
    }

    #[test]
    fn many_stars_cost_no_more_than_pattern_times_name() {
        let pattern = b"*a*a*a*a*a*a*a*a*a*a*a*a*b";
        let name = [b'a'; 4096];
        assert!(!matches(pattern, &name, Case::Exact));
    }
}
