//! Sequitur: online, linear-time inference of a hierarchical grammar from a
//! symbol sequence (Nevill-Manning & Witten, "Compression and Explanation
//! Using Hierarchical Grammars", The Computer Journal 40, 1997).
//!
//! 002 §2.2 (Tabatabaee & Hollingsworth) feeds each process's sequence of
//! (MPI function, peer) pairs to Sequitur and takes its rules as the
//! candidate repeated communication patterns ("typical sequences", §4.1).
//! The grammar generates exactly the input (no generalisation) and, after
//! every [`Sequitur::push`], keeps the two invariants of the paper:
//!
//! * digram uniqueness: no pair of adjacent symbols occurs twice in the
//!   grammar (overlapping occurrences such as the two `aa` in `aaa` excepted);
//! * rule utility: every rule but the start rule is used at least twice.
//!
//! Table 1 of 002: `abcdbc` gives `S → aAdA, A → bc`; `abcdbcabcdbc` gives
//! `S → AA, A → aBdB, B → bc`.
//!
//! The working grammar is an arena of nodes forming one circular doubly
//! linked list per rule (closed by a guard node), with a digram index from
//! symbol pairs to the node that starts the pair. [`Sequitur::grammar`]
//! copies it out as an owned [`Grammar`].

use std::{
    collections::{HashMap, hash_map::Entry},
    hash::{BuildHasherDefault, Hash, Hasher},
};

/// Index of a rule in a [`Grammar`]; [`RuleId::START`] expands to the input.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RuleId(pub usize);

impl RuleId {
    /// The start rule (S), which expands to the whole input.
    pub const START: RuleId = RuleId(0);
}

/// A symbol of a rule's right-hand side.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Symbol<T> {
    /// An input symbol.
    Terminal(T),
    /// A reference to another rule of the same grammar.
    Rule(RuleId),
}

/// One rule of a [`Grammar`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule<T> {
    /// Right-hand side, left to right.
    pub body: Vec<Symbol<T>>,
    /// How many times the rule is referenced from the grammar (0 for the
    /// start rule, at least 2 for every other rule).
    pub uses: usize,
    /// Number of terminals the rule expands to.
    pub expanded_len: usize,
}

/// An owned snapshot of the grammar built by [`Sequitur`].
///
/// Rule 0 is the start rule; the others are numbered in order of first
/// appearance when reading rule bodies in rule order (breadth first from the
/// start rule), so equal inputs give equal grammars.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grammar<T> {
    rules: Vec<Rule<T>>,
}

impl<T: Copy> Grammar<T> {
    /// All rules; index `i` is `RuleId(i)`.
    pub fn rules(&self) -> &[Rule<T>] {
        &self.rules
    }

    /// One rule, if `id` is in range.
    pub fn rule(&self, id: RuleId) -> Option<&Rule<T>> {
        self.rules.get(id.0)
    }

    /// Expanded length of `rule` (0 if out of range).
    pub fn len(&self, rule: RuleId) -> usize {
        self.rules.get(rule.0).map_or(0, |r| r.expanded_len)
    }

    /// The terminals `rule` expands to (empty if out of range).
    pub fn expand(&self, rule: RuleId) -> Vec<T> {
        let mut out = Vec::with_capacity(self.len(rule));
        // Explicit stack of (rule, position): grammars can be deep (a run of
        // n equal symbols nests log n rules) and recursion is not needed.
        let mut stack = vec![(rule.0, 0usize)];
        while let Some((r, pos)) = stack.pop() {
            let Some(sym) = self.rules.get(r).and_then(|r| r.body.get(pos)) else {
                continue;
            };
            stack.push((r, pos + 1));
            match *sym {
                Symbol::Terminal(t) => out.push(t),
                Symbol::Rule(inner) => stack.push((inner.0, 0)),
            }
        }
        out
    }
}

/// Online Sequitur grammar inducer over terminals of type `T`.
#[derive(Clone, Debug)]
pub struct Sequitur<T> {
    nodes: Vec<Node<T>>,
    free_nodes: Vec<usize>,
    rules: Vec<RuleSlot>,
    free_rules: Vec<usize>,
    /// Digram index: (symbol, next symbol) → the node holding the first one.
    digrams: HashMap<(Sym<T>, Sym<T>), usize, BuildHasherDefault<FastHasher>>,
    /// Pending work; a stack so that work triggered by a change runs before
    /// older work, in the order the recursive reference implementation uses.
    tasks: Vec<Task>,
    pushed: usize,
}

const NIL: usize = usize::MAX;
/// Internal id of the start rule: allocated first, never freed.
const START: usize = 0;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Sym<T> {
    Term(T),
    Rule(usize),
    /// Closes the circular list of rule `.0`; never part of a digram.
    Guard(usize),
}

#[derive(Clone, Debug)]
struct Node<T> {
    sym: Sym<T>,
    prev: usize,
    next: usize,
    /// Bumped when the node is freed, so queued handles to it go stale.
    generation: u32,
}

#[derive(Clone, Debug)]
struct RuleSlot {
    guard: usize,
    /// References to the rule from other rule bodies.
    uses: usize,
}

#[derive(Clone, Copy, Debug)]
struct Handle {
    node: usize,
    generation: u32,
}

#[derive(Clone, Copy, Debug)]
enum Task {
    /// Check the digram starting at this node.
    Check(Handle),
    /// If this node references a rule now used only once, inline that rule.
    Underused(Handle),
}

impl<T: Copy + Eq + Hash> Default for Sequitur<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Copy + Eq + Hash> Sequitur<T> {
    /// An empty grammar (start rule with an empty body).
    pub fn new() -> Self {
        let mut s = Self {
            nodes: Vec::new(),
            free_nodes: Vec::new(),
            rules: Vec::new(),
            free_rules: Vec::new(),
            digrams: HashMap::default(),
            tasks: Vec::new(),
            pushed: 0,
        };
        let start = s.alloc_rule();
        debug_assert_eq!(start, START);
        s
    }

    /// Number of symbols pushed so far.
    pub fn len(&self) -> usize {
        self.pushed
    }

    /// True if nothing was pushed yet.
    pub fn is_empty(&self) -> bool {
        self.pushed == 0
    }

    /// Appends one symbol and restores both invariants (amortised O(1)).
    pub fn push(&mut self, sym: T) {
        let Some(guard) = self.rules.get(START).map(|r| r.guard) else {
            debug_assert!(false, "start rule missing");
            return;
        };
        let last = self.nodes[guard].prev;
        let node = self.alloc_node(Sym::Term(sym));
        self.insert_after(last, node);
        self.pushed += 1;
        let h = self.handle(last);
        self.tasks.push(Task::Check(h));
        self.settle();
    }

    /// Copies the current grammar out (O(grammar size)).
    pub fn grammar(&self) -> Grammar<T> {
        // Public numbering: breadth first from the start rule.
        let mut public = vec![NIL; self.rules.len()];
        let mut order = vec![START];
        public[START] = 0;
        let mut bodies: Vec<Vec<Symbol<T>>> = Vec::new();
        let mut i = 0;
        while let Some(&r) = order.get(i) {
            let guard = self.rules[r].guard;
            let mut body = Vec::new();
            let mut n = self.nodes[guard].next;
            while n != guard {
                match self.nodes[n].sym {
                    Sym::Term(t) => body.push(Symbol::Terminal(t)),
                    Sym::Rule(inner) => {
                        if public[inner] == NIL {
                            public[inner] = order.len();
                            order.push(inner);
                        }
                        body.push(Symbol::Rule(RuleId(public[inner])));
                    }
                    Sym::Guard(_) => {
                        debug_assert!(false, "guard inside a rule body");
                        break;
                    }
                }
                n = self.nodes[n].next;
            }
            bodies.push(body);
            i += 1;
        }
        let mut uses = vec![0usize; bodies.len()];
        for sym in bodies.iter().flatten() {
            if let Symbol::Rule(r) = sym {
                uses[r.0] += 1;
            }
        }
        debug_assert!(
            order
                .iter()
                .enumerate()
                .all(|(p, &r)| p == 0 || uses[p] == self.rules[r].uses),
            "use counts out of sync"
        );
        let lens = expanded_lens(&bodies);
        Grammar {
            rules: bodies
                .into_iter()
                .zip(uses)
                .zip(lens)
                .map(|((body, uses), expanded_len)| Rule {
                    body,
                    uses,
                    expanded_len,
                })
                .collect(),
        }
    }

    // ----- arena -----

    fn alloc_node(&mut self, sym: Sym<T>) -> usize {
        if let Some(i) = self.free_nodes.pop() {
            let n = &mut self.nodes[i];
            n.sym = sym;
            n.prev = NIL;
            n.next = NIL;
            i
        } else {
            self.nodes.push(Node {
                sym,
                prev: NIL,
                next: NIL,
                generation: 0,
            });
            self.nodes.len() - 1
        }
    }

    fn free_node(&mut self, i: usize) {
        let n = &mut self.nodes[i];
        n.generation = n.generation.wrapping_add(1);
        n.prev = NIL;
        n.next = NIL;
        self.free_nodes.push(i);
    }

    fn alloc_rule(&mut self) -> usize {
        let r = self.free_rules.pop().unwrap_or(self.rules.len());
        let guard = self.alloc_node(Sym::Guard(r));
        self.nodes[guard].prev = guard;
        self.nodes[guard].next = guard;
        let slot = RuleSlot { guard, uses: 0 };
        if r == self.rules.len() {
            self.rules.push(slot);
        } else {
            self.rules[r] = slot;
        }
        r
    }

    fn handle(&self, node: usize) -> Handle {
        Handle {
            node,
            generation: self.nodes[node].generation,
        }
    }

    fn valid(&self, h: Handle) -> bool {
        self.nodes
            .get(h.node)
            .is_some_and(|n| n.generation == h.generation && n.next != NIL)
    }

    fn is_guard(&self, n: usize) -> bool {
        matches!(self.nodes[n].sym, Sym::Guard(_))
    }

    /// Same symbol and not a guard (guards never form digrams).
    fn same(&self, a: usize, b: usize) -> bool {
        !self.is_guard(a) && self.nodes[a].sym == self.nodes[b].sym
    }

    /// The digram starting at `n`, if `n` and its successor are real symbols.
    fn digram(&self, n: usize) -> Option<(Sym<T>, Sym<T>)> {
        let next = self.nodes[n].next;
        if next == NIL || self.is_guard(n) || self.is_guard(next) {
            return None;
        }
        Some((self.nodes[n].sym, self.nodes[next].sym))
    }

    // ----- list and index maintenance (after the reference implementation) -----

    /// Forgets the digram starting at `n` if the index points at `n`.
    fn delete_digram(&mut self, n: usize) {
        if let Some(key) = self.digram(n)
            && self.digrams.get(&key) == Some(&n)
        {
            self.digrams.remove(&key);
        }
    }

    /// Links `left → right`, dropping the digram `left` started.
    fn join(&mut self, left: usize, right: usize) {
        if self.nodes[left].next != NIL {
            self.delete_digram(left);
            // In a run `xxx` only the first of the two overlapping `xx` is
            // indexed; when the run is broken, index the surviving one so it
            // is not forgotten (reference implementation, e.g. `abbbabcbb`).
            let (rp, rn) = (self.nodes[right].prev, self.nodes[right].next);
            if rp != NIL && rn != NIL && self.same(right, rp) && self.same(right, rn) {
                self.index(right);
            }
            let (lp, ln) = (self.nodes[left].prev, self.nodes[left].next);
            if lp != NIL && ln != NIL && self.same(left, ln) && self.same(left, lp) {
                self.index(lp);
            }
        }
        self.nodes[left].next = right;
        self.nodes[right].prev = left;
    }

    fn index(&mut self, n: usize) {
        if let Some(key) = self.digram(n) {
            self.digrams.insert(key, n);
        }
    }

    fn insert_after(&mut self, at: usize, new: usize) {
        let next = self.nodes[at].next;
        self.join(new, next);
        self.join(at, new);
    }

    /// Unlinks and frees `n`, dropping its digrams and its use of a rule.
    fn delete_node(&mut self, n: usize) {
        let (prev, next) = (self.nodes[n].prev, self.nodes[n].next);
        self.join(prev, next);
        self.delete_digram(n);
        if let Sym::Rule(r) = self.nodes[n].sym {
            self.rules[r].uses = self.rules[r].uses.saturating_sub(1);
        }
        self.free_node(n);
    }

    /// Replaces the digram starting at `first` by a reference to `rule`;
    /// returns (node before, new node).
    fn substitute(&mut self, first: usize, rule: usize) -> (usize, usize) {
        let q = self.nodes[first].prev;
        self.delete_node(self.nodes[q].next);
        self.delete_node(self.nodes[q].next);
        let new = self.alloc_node(Sym::Rule(rule));
        self.insert_after(q, new);
        self.rules[rule].uses += 1;
        (q, new)
    }

    /// The rule whose whole body is the digram starting at `n` (never S).
    fn whole_rule(&self, n: usize) -> Option<usize> {
        let Sym::Guard(r) = self.nodes[self.nodes[n].prev].sym else {
            return None;
        };
        let after = self.nodes[self.nodes[n].next].next;
        (r != START && after != NIL && self.is_guard(after)).then_some(r)
    }

    // ----- the algorithm -----

    fn settle(&mut self) {
        while let Some(task) = self.tasks.pop() {
            match task {
                Task::Check(h) if self.valid(h) => self.check(h.node),
                Task::Underused(h) if self.valid(h) => {
                    if let Sym::Rule(r) = self.nodes[h.node].sym
                        && self.rules[r].uses == 1
                    {
                        self.expand(h.node);
                    }
                }
                _ => {}
            }
        }
    }

    /// Digram uniqueness for the digram starting at `n`.
    fn check(&mut self, n: usize) {
        let Some(key) = self.digram(n) else { return };
        let m = match self.digrams.entry(key) {
            Entry::Vacant(v) => {
                v.insert(n);
                return;
            }
            Entry::Occupied(o) => *o.get(),
        };
        // Already indexed, or overlapping (`xxx`): nothing to do.
        if m == n || self.nodes[m].next == n || self.nodes[n].next == m {
            return;
        }
        if self.digram(m) != Some(key) {
            // Stale entry: cannot happen if the index is kept right, but
            // re-pointing it is the safe recovery.
            debug_assert!(false, "stale digram index entry");
            self.digrams.insert(key, n);
            return;
        }
        self.match_digrams(n, m);
    }

    /// `ss` and `m` start equal, non-overlapping digrams: make them one rule.
    fn match_digrams(&mut self, ss: usize, m: usize) {
        // Queued last-in first-out: checks of the digrams around the new
        // references first (m's side first), then rule utility of the rule's
        // body (first symbol first).
        let (rule, checks) = if let Some(r) = self.whole_rule(m) {
            // m is a whole rule body: reuse that rule.
            let (q, new) = self.substitute(ss, r);
            (r, [Some((q, new)), None])
        } else if let Some(r) = self.whole_rule(ss) {
            debug_assert!(self.whole_rule(m).is_none());
            let (q, new) = self.substitute(m, r);
            (r, [Some((q, new)), None])
        } else {
            let r = self.alloc_rule();
            let guard = self.rules[r].guard;
            let (s0, s1) = (self.nodes[ss].sym, self.nodes[self.nodes[ss].next].sym);
            let a = self.alloc_node(s0);
            let b = self.alloc_node(s1);
            // Count the copies before the originals are deleted so that no
            // use count passes through 0.
            for s in [s0, s1] {
                if let Sym::Rule(x) = s {
                    self.rules[x].uses += 1;
                }
            }
            self.insert_after(guard, a);
            self.insert_after(a, b);
            let on_m = self.substitute(m, r);
            let on_ss = self.substitute(ss, r);
            // Both old occurrences are gone: the body now holds the digram.
            self.digrams.insert((s0, s1), a);
            (r, [Some(on_m), Some(on_ss)])
        };
        let guard = self.rules[rule].guard;
        let (first, last) = (self.nodes[guard].next, self.nodes[guard].prev);
        for n in [last, first] {
            let h = self.handle(n);
            self.tasks.push(Task::Underused(h));
        }
        for (q, new) in checks.into_iter().rev().flatten() {
            let (hn, hq) = (self.handle(new), self.handle(q));
            self.tasks.push(Task::Check(hn));
            self.tasks.push(Task::Check(hq));
        }
    }

    /// Rule utility: inline the rule referenced (only) by node `u`.
    fn expand(&mut self, u: usize) {
        let Sym::Rule(r) = self.nodes[u].sym else {
            return;
        };
        let guard = self.rules[r].guard;
        let (first, last) = (self.nodes[guard].next, self.nodes[guard].prev);
        if first == guard {
            debug_assert!(false, "empty rule");
            return;
        }
        let (left, right) = (self.nodes[u].prev, self.nodes[u].next);
        self.delete_digram(left);
        self.delete_digram(u);
        self.join(left, first);
        self.join(last, right);
        self.free_node(u);
        self.free_node(guard);
        self.rules[r].uses = 0;
        self.free_rules.push(r);
        // Two new digrams at the seams (the reference indexes only the
        // right one; checking both also catches a duplicate there).
        let (hl, hr) = (self.handle(left), self.handle(last));
        self.tasks.push(Task::Check(hl));
        self.tasks.push(Task::Check(hr));
    }
}

impl<T: Copy + Eq + Hash> Extend<T> for Sequitur<T> {
    fn extend<I: IntoIterator<Item = T>>(&mut self, iter: I) {
        for sym in iter {
            self.push(sym);
        }
    }
}

impl<T: Copy + Eq + Hash> FromIterator<T> for Sequitur<T> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        let mut s = Self::new();
        s.extend(iter);
        s
    }
}

/// Expanded length of each rule, children before parents (iterative DFS).
fn expanded_lens<T>(bodies: &[Vec<Symbol<T>>]) -> Vec<usize> {
    let mut lens = vec![NIL; bodies.len()];
    let mut stack = Vec::new();
    for root in 0..bodies.len() {
        stack.push((root, false));
        while let Some((r, children_done)) = stack.pop() {
            if lens[r] != NIL {
                continue;
            }
            let body = &bodies[r];
            if children_done {
                lens[r] = body
                    .iter()
                    .map(|s| match s {
                        Symbol::Terminal(_) => 1,
                        Symbol::Rule(x) => {
                            lens.get(x.0).copied().filter(|&l| l != NIL).unwrap_or(0)
                        }
                    })
                    .sum();
            } else {
                stack.push((r, true));
                for s in body {
                    if let Symbol::Rule(x) = s
                        && lens.get(x.0).is_some_and(|&l| l == NIL)
                    {
                        stack.push((x.0, false));
                    }
                }
            }
        }
    }
    lens
}

/// FxHash-style hasher (rustc-hash 2 constants) for the digram index: keys
/// are a few machine words from our own traces, so HashDoS resistance buys
/// nothing and SipHash would dominate the per-symbol cost.
#[derive(Clone, Copy, Debug, Default)]
struct FastHasher(u64);

impl FastHasher {
    const K: u64 = 0xf135_7aea_2e62_a9c5;

    fn add(&mut self, word: u64) {
        self.0 = self.0.wrapping_add(word).wrapping_mul(Self::K);
    }
}

impl Hasher for FastHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut buf = [0u8; 8];
            buf[..chunk.len()].copy_from_slice(chunk);
            self.add(u64::from_le_bytes(buf));
        }
    }
    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }
    fn write_u16(&mut self, i: u16) {
        self.add(u64::from(i));
    }
    fn write_u32(&mut self, i: u32) {
        self.add(u64::from(i));
    }
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }
    fn finish(&self) -> u64 {
        // The multiply mixes upwards; bring the high bits down for the
        // table's bucket index.
        self.0.rotate_left(26)
    }
}

#[cfg(test)]
mod tests {
    use std::{collections::HashMap, fmt::Debug};

    use super::*;

    /// Deterministic xorshift64* for the property tests.
    struct Rng(u64);

    impl Rng {
        fn new(seed: u64) -> Self {
            Self(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
        }
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    /// Canonical text: `S` for the start rule, other rules lettered `A`, `B`,
    /// … in order of first appearance reading bodies breadth first, so two
    /// grammars equal up to rule numbering print the same.
    fn canon(g: &Grammar<char>) -> String {
        let mut names: HashMap<usize, char> = HashMap::from([(0, 'S')]);
        let mut order = vec![0];
        let mut out = Vec::new();
        let mut i = 0;
        while let Some(&r) = order.get(i) {
            let mut text = format!("{}->", names[&r]);
            for s in &g.rules()[r].body {
                match *s {
                    Symbol::Terminal(c) => text.push(c),
                    Symbol::Rule(x) => {
                        let next = char::from(b'A' + names.len() as u8 - 1);
                        let name = *names.entry(x.0).or_insert_with(|| {
                            order.push(x.0);
                            next
                        });
                        text.push(name);
                    }
                }
            }
            out.push(text);
            i += 1;
        }
        assert_eq!(order.len(), g.rules().len(), "unreachable rules");
        out.join(" ")
    }

    fn induce(input: &str) -> Grammar<char> {
        input.chars().collect::<Sequitur<char>>().grammar()
    }

    /// Everything the module promises about a grammar built from `input`.
    fn assert_invariants<T: Copy + Eq + Hash + Debug>(g: &Grammar<T>, input: &[T]) {
        assert_eq!(
            g.expand(RuleId::START),
            input,
            "start rule must expand to the input"
        );
        assert_eq!(g.len(RuleId::START), input.len());
        let mut refs = vec![0usize; g.rules().len()];
        // Digram → occurrences (rule, position).
        let mut seen = HashMap::new();
        for (r, rule) in g.rules().iter().enumerate() {
            for s in &rule.body {
                if let Symbol::Rule(x) = s {
                    assert!(x.0 < g.rules().len() && x.0 != 0, "bad reference {x:?}");
                    refs[x.0] += 1;
                }
            }
            for (p, w) in rule.body.windows(2).enumerate() {
                let occ: &mut Vec<(usize, usize)> = seen.entry((w[0], w[1])).or_default();
                for &(r2, p2) in occ.iter() {
                    // Only the two overlapping pairs of a run `xxx` may repeat.
                    assert!(
                        r2 == r && p.abs_diff(p2) < 2,
                        "digram {:?} repeated: rule {r2} @{p2} and rule {r} @{p}",
                        (w[0], w[1])
                    );
                }
                occ.push((r, p));
            }
            if r != 0 {
                assert!(
                    rule.body.len() >= 2,
                    "rule {r} body {:?} too short",
                    rule.body
                );
                assert!(rule.uses >= 2, "rule {r} used {} times", rule.uses);
            }
            assert_eq!(rule.uses, refs_of(g, r));
            assert_eq!(rule.expanded_len, g.expand(RuleId(r)).len());
            assert_eq!(g.len(RuleId(r)), rule.expanded_len);
        }
        for (r, &n) in refs.iter().enumerate() {
            assert_eq!(g.rules()[r].uses, n);
        }
    }

    fn refs_of<T: Copy>(g: &Grammar<T>, r: usize) -> usize {
        g.rules()
            .iter()
            .flat_map(|rule| &rule.body)
            .filter(|s| matches!(s, Symbol::Rule(x) if x.0 == r))
            .count()
    }

    fn assert_str(input: &str) -> Grammar<char> {
        let g = induce(input);
        let chars: Vec<char> = input.chars().collect();
        assert_invariants(&g, &chars);
        g
    }

    #[test]
    fn paper_table1_a() {
        assert_eq!(canon(&assert_str("abcdbc")), "S->aAdA A->bc");
    }

    #[test]
    fn paper_table1_b() {
        let g = assert_str("abcdbcabcdbc");
        assert_eq!(canon(&g), "S->AA A->aBdB B->bc");
        // 002 §2.2: "A and B rules, whose corresponding sequences are
        // abcdbc and bc".
        assert_eq!(g.expand(RuleId(1)), "abcdbc".chars().collect::<Vec<_>>());
        assert_eq!(g.expand(RuleId(2)), vec!['b', 'c']);
        assert_eq!(g.rules()[1].uses, 2);
        assert_eq!(g.rules()[2].uses, 2);
        assert_eq!(g.len(RuleId(1)), 6);
    }

    #[test]
    fn public_numbering_follows_first_appearance() {
        let g = induce("abcdbcabcdbc");
        let a = Symbol::Terminal('a');
        let (r1, r2) = (Symbol::Rule(RuleId(1)), Symbol::Rule(RuleId(2)));
        assert_eq!(g.rules()[0].body, vec![r1, r1]);
        assert_eq!(g.rules()[1].body, vec![a, r2, Symbol::Terminal('d'), r2]);
    }

    #[test]
    fn empty_and_single() {
        let s = Sequitur::<u32>::new();
        assert!(s.is_empty());
        let g = s.grammar();
        assert_eq!(g.rules().len(), 1);
        assert!(g.rules()[0].body.is_empty());
        assert!(g.expand(RuleId::START).is_empty());
        assert_eq!(g.len(RuleId::START), 0);
        assert_eq!(canon(&assert_str("a")), "S->a");
        assert_eq!(canon(&assert_str("ab")), "S->ab");
    }

    #[test]
    fn out_of_range_rule() {
        let g = induce("abab");
        assert_eq!(g.len(RuleId(9)), 0);
        assert!(g.expand(RuleId(9)).is_empty());
        assert!(g.rule(RuleId(9)).is_none());
    }

    #[test]
    fn runs_of_one_symbol() {
        assert_eq!(canon(&assert_str("aa")), "S->aa");
        assert_eq!(canon(&assert_str("aaa")), "S->aaa");
        assert_eq!(canon(&assert_str("aaaa")), "S->AA A->aa");
        assert_eq!(canon(&assert_str("aaaaa")), "S->AAa A->aa");
        assert_eq!(canon(&assert_str("aaaaaaaa")), "S->AA A->BB B->aa");
        for n in 0..300 {
            assert_str(&"a".repeat(n));
        }
    }

    #[test]
    fn alternating() {
        assert_eq!(canon(&assert_str("abab")), "S->AA A->ab");
        assert_eq!(canon(&assert_str("ababab")), "S->AAA A->ab");
        assert_eq!(canon(&assert_str("abababab")), "S->AA A->BB B->ab");
        for n in 0..200 {
            assert_str(&"ab".repeat(n));
            assert_str(&"abc".repeat(n));
        }
    }

    #[test]
    fn classic_edge_cases() {
        // Triples and runs broken up, rules ending in a rule, rules inlined
        // when their use count drops to 1.
        for input in [
            "abbbabcbb",
            "abcabcabc",
            "abcabdabcabd",
            "aabaaab",
            "aaabaaab",
            "abaabaaba",
            "xabcabcyabcabc",
            "abcdeabcdeabcde",
            "aaaaabaaaaab",
            "babaabaabaabab",
            "pease porridge hot, pease porridge cold, pease porridge in the pot, nine days old.",
        ] {
            assert_str(input);
        }
        // The rule for `ab` is inlined once `abc` takes over its two uses.
        assert_eq!(canon(&assert_str("abcabc")), "S->AA A->abc");
    }

    #[test]
    fn generic_over_pairs() {
        // (MPI function, peer) as the analyzer feeds them.
        let body = [(1u16, 3u32), (2, 3), (1, 5), (3, 0)];
        let input: Vec<(u16, u32)> = body.iter().copied().cycle().take(4 * 64).collect();
        let g = input.iter().copied().collect::<Sequitur<_>>().grammar();
        assert_invariants(&g, &input);
        // 64 repetitions collapse into a log-depth hierarchy.
        assert!(g.rules().len() <= 10, "{} rules", g.rules().len());
        assert!(g.rules().iter().any(|r| r.expanded_len == 4));
    }

    #[test]
    fn random_inputs() {
        for seed in 0..300u64 {
            let mut rng = Rng::new(seed);
            let alphabet = 1 + rng.below(6) as u32;
            let len = rng.below(2001) as usize;
            let input: Vec<u32> = (0..len)
                .map(|_| rng.below(u64::from(alphabet)) as u32)
                .collect();
            let g = input.iter().copied().collect::<Sequitur<_>>().grammar();
            assert_invariants(&g, &input);
        }
    }

    #[test]
    fn random_inputs_every_prefix() {
        // The invariants hold after every push, not only at the end.
        for seed in 1000..1100u64 {
            let mut rng = Rng::new(seed);
            let alphabet = 1 + rng.below(4) as u32;
            let len = rng.below(150) as usize;
            let input: Vec<u32> = (0..len)
                .map(|_| rng.below(u64::from(alphabet)) as u32)
                .collect();
            let mut s = Sequitur::new();
            for (i, &x) in input.iter().enumerate() {
                s.push(x);
                assert_eq!(s.len(), i + 1);
                assert_invariants(&s.grammar(), &input[..=i]);
            }
        }
    }

    #[test]
    fn periodic_inputs() {
        for seed in 0..120u64 {
            let mut rng = Rng::new(seed + 7);
            let period = 1 + rng.below(20) as usize;
            let alphabet = 1 + rng.below(6);
            let body: Vec<u32> = (0..period).map(|_| rng.below(alphabet) as u32).collect();
            let len = rng.below(2001) as usize;
            // Some with noise (substitutions), some clean.
            let noise = [0, 0, 20, 100][seed as usize % 4];
            let input: Vec<u32> = (0..len)
                .map(|i| {
                    if noise > 0 && rng.below(1000) < noise {
                        rng.below(alphabet) as u32
                    } else {
                        body[i % period]
                    }
                })
                .collect();
            let g = input.iter().copied().collect::<Sequitur<_>>().grammar();
            assert_invariants(&g, &input);
            if noise == 0 && len >= 8 * period {
                // Clean repetition compresses: the start rule is short.
                assert!(
                    g.rules()[0].body.len() < len / 2,
                    "period {period}, len {len}: start body {}",
                    g.rules()[0].body.len()
                );
            }
        }
    }

    #[test]
    fn grammar_is_a_snapshot() {
        let mut s = Sequitur::new();
        s.extend("abcab".chars());
        let before = s.grammar();
        s.extend("cabc".chars());
        assert_eq!(canon(&before), "S->AcA A->ab");
        assert_invariants(&s.grammar(), &"abcabcabc".chars().collect::<Vec<_>>());
    }
}
