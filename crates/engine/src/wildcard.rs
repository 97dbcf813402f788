//! One wildcard matcher for names: `*` any run of bytes, `?` one byte, anything else itself,
//! ASCII case ignored. The environment policy matches variable names with it.
//!
//! Linear backtracking (a `*` remembers where it started and takes one more byte on a
//! mismatch), so a pattern a client sends costs at most pattern × name steps, never the
//! exponential time of naive recursion over `*`s.

pub(crate) fn matches(pattern: &[u8], name: &[u8]) -> bool {
    let same = |p: u8, n: u8| p.eq_ignore_ascii_case(&n);
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
        assert!(matches(b"*.key", b"a.key"));
        assert!(matches(b"?.key", b"a.key"));
        assert!(!matches(b"?.key", b"ab.key"));
        assert!(matches(b"*", b""));
        assert!(!matches(b"*.key", b"a.keys"));
        assert!(!matches(b"X*", b"YX"));
        assert!(!matches(b"A?C", b"ABBC"));
        assert!(matches(b"*KEY*", b"my_api_key"));
        assert!(matches(b"A?C", b"abc"));
        assert!(!matches(b"A?C", b"abbc"));
    }

    #[test]
    fn many_stars_cost_no_more_than_pattern_times_name() {
        let pattern = b"*a*a*a*a*a*a*a*a*a*a*a*a*b";
        let name = [b'a'; 4096];
        assert!(!matches(pattern, &name));
    }
}
