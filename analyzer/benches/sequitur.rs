//! Sequitur grammar induction rate on 2 M symbols: an MPI-like periodic
//! sequence (a loop body of 12 calls over an alphabet of 40, 5 % random
//! substitutions) and a uniformly random one. Prints symbols/s.
//! Run with `cargo bench -p analyzer --bench sequitur`.

use std::time::Instant;

use analyzer::sequitur::Sequitur;

const SYMBOLS: usize = 2_000_000;
const ALPHABET: u64 = 40;

/// xorshift64*: deterministic input without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u32 {
        (self.next() % n) as u32
    }
}

fn periodic(rng: &mut Rng) -> Vec<u32> {
    let body: Vec<u32> = (0..12).map(|_| rng.below(ALPHABET)).collect();
    (0..SYMBOLS)
        .map(|i| {
            if rng.below(100) < 5 {
                rng.below(ALPHABET)
            } else {
                body[i % body.len()]
            }
        })
        .collect()
}

fn random(rng: &mut Rng) -> Vec<u32> {
    (0..SYMBOLS).map(|_| rng.below(ALPHABET)).collect()
}

fn run(name: &str, input: &[u32]) {
    let mut best = f64::MAX;
    let mut rules = 0;
    let mut start_len = 0;
    for _ in 0..3 {
        let start = Instant::now();
        let mut s = Sequitur::new();
        for &x in input {
            s.push(x);
        }
        best = best.min(start.elapsed().as_secs_f64());
        let g = s.grammar();
        rules = g.rules().len();
        start_len = g.rules()[0].body.len();
        std::hint::black_box(&g);
    }
    println!(
        "sequitur {name}: {} symbols in {best:.3} s = {:.2} M symbols/s ({rules} rules, start rule {start_len} symbols; one core, best of 3)",
        input.len(),
        input.len() as f64 / best / 1e6
    );
}

fn main() {
    let mut rng = Rng(0x5eed_1234_abcd_ef01);
    run("periodic", &periodic(&mut rng));
    run("random", &random(&mut rng));
}
