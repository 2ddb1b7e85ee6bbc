//! The overhead budget: what the agent measures of itself each second (event
//! rate, its own CPU and memory) and how it sheds load when over budget:
//! first the CPU samples, then, one at a time, the function probe hit most
//! often (the most frequent calls cost the targets most and say least per
//! call). Every step is recorded and reported.

use std::{collections::BTreeMap, time::Instant};

use serde::Serialize;

use super::config::BudgetSection;

/// The agent's own usage, measured over the last second.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Usage {
    /// Records per second.
    pub events_per_s: f64,
    /// The agent's CPU, percent of one core.
    pub cpu_percent: f64,
    /// The agent's resident memory, bytes.
    pub rss_bytes: u64,
}

/// Measures [`Usage`] from successive readings.
#[derive(Debug)]
pub struct Meter {
    at: Instant,
    records: u64,
    cpu_ticks: u64,
    ticks_per_s: f64,
    page: u64,
    /// The last measurement.
    pub usage: Usage,
}

/// The shortest interval a reading covers, s.
const MIN_INTERVAL_S: f64 = 0.5;

impl Meter {
    /// Starts measuring.
    pub fn new(records: u64) -> Self {
        // SAFETY: sysconf has no preconditions.
        let (tck, page) = unsafe {
            (
                libc::sysconf(libc::_SC_CLK_TCK),
                libc::sysconf(libc::_SC_PAGESIZE),
            )
        };
        Self {
            at: Instant::now(),
            records,
            cpu_ticks: own_cpu_ticks(),
            ticks_per_s: if tck > 0 { tck as f64 } else { 100.0 },
            page: if page > 0 { page as u64 } else { 4096 },
            usage: Usage::default(),
        }
    }

    /// Takes a reading; `records` is the total written so far (it may go
    /// back to 0 when a new session starts).
    pub fn measure(&mut self, records: u64) -> Usage {
        let dt = self.at.elapsed().as_secs_f64();
        // A reading right after the meter started (a session that began
        // between two of the agent's seconds) would make a rate of a few
        // start-up records over milliseconds: 3 records in 1 ms read as
        // 3,000 events/s and shed sampling before the target ran. The
        // interval goes on until it is long enough to say something.
        if dt < MIN_INTERVAL_S {
            return self.usage;
        }
        let cpu = own_cpu_ticks();
        self.usage = Usage {
            events_per_s: records.saturating_sub(self.records) as f64 / dt,
            cpu_percent: cpu.saturating_sub(self.cpu_ticks) as f64 / self.ticks_per_s / dt * 100.0,
            rss_bytes: own_rss_pages() * self.page,
        };
        self.at = Instant::now();
        self.records = records;
        self.cpu_ticks = cpu;
        self.usage
    }
}

fn own_cpu_ticks() -> u64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0;
    };
    // Fields after the command name (which may hold spaces): utime is the
    // 14th field of the line, the 12th after ')'.
    let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
        return 0;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let get = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    get(11) + get(12)
}

fn own_rss_pages() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

/// One shedding step.
#[derive(Clone, Debug, Serialize)]
pub struct ShedAction {
    /// Seconds since the agent started.
    pub at_s: f64,
    /// What was done.
    pub action: String,
    /// Why.
    pub why: String,
}

/// What to do next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Within budget, or not yet patient enough.
    Nothing,
    /// Re-arm without CPU sampling.
    StopSampling,
    /// Re-arm without this function.
    DropFunction(String),
    /// Drop the preambles kept in memory.
    DropPreambles,
}

/// Load-shedding state: what was taken away, and the evidence for the next
/// step.
#[derive(Debug, Default, Serialize)]
pub struct Shed {
    /// Whether sampling is still on (when configured).
    pub sampling: bool,
    /// Functions left out.
    pub excluded: Vec<String>,
    /// Every step taken.
    pub actions: Vec<ShedAction>,
    #[serde(skip)]
    over_for: u32,
    #[serde(skip)]
    hits: BTreeMap<String, u64>,
    #[serde(skip)]
    exhausted: bool,
    /// Whether the preambles were dropped for memory.
    pub preambles_dropped: bool,
}

impl Shed {
    /// Nothing shed yet.
    pub fn new() -> Self {
        Self {
            sampling: true,
            ..Self::default()
        }
    }

    /// Adds function entries seen in the last second (symbol → calls).
    pub fn add_hits(&mut self, hits: impl IntoIterator<Item = (String, u64)>) {
        for (name, n) in hits {
            *self.hits.entry(name).or_default() += n;
        }
    }

    /// Decides, once a second, given the usage, the budget and whether
    /// sampling is configured. `at_s` is the agent's age.
    pub fn decide(
        &mut self,
        usage: &Usage,
        budget: &BudgetSection,
        sampling_configured: bool,
        at_s: f64,
    ) -> Step {
        if budget.max_memory.0 > 0
            && usage.rss_bytes > budget.max_memory.0
            && !self.preambles_dropped
        {
            self.preambles_dropped = true;
            self.actions.push(ShedAction {
                at_s,
                action: "dropped the preambles kept in memory".into(),
                why: format!(
                    "resident memory {} MiB over the budget of {} MiB",
                    usage.rss_bytes >> 20,
                    budget.max_memory.0 >> 20
                ),
            });
            return Step::DropPreambles;
        }
        let rate_over = budget.max_events_per_second > 0
            && usage.events_per_s > budget.max_events_per_second as f64;
        let cpu_over = budget.max_cpu_percent > 0.0 && usage.cpu_percent > budget.max_cpu_percent;
        if !rate_over && !cpu_over {
            self.over_for = 0;
            self.hits.clear();
            return Step::Nothing;
        }
        self.over_for += 1;
        if self.over_for < budget.patience {
            return Step::Nothing;
        }
        self.over_for = 0;
        let why = if rate_over {
            format!(
                "{:.0} events/s over the budget of {} for {} s",
                usage.events_per_s, budget.max_events_per_second, budget.patience
            )
        } else {
            format!(
                "agent CPU {:.1}% over the budget of {:.1}% for {} s",
                usage.cpu_percent, budget.max_cpu_percent, budget.patience
            )
        };
        let hits = std::mem::take(&mut self.hits);
        if sampling_configured && self.sampling {
            self.sampling = false;
            self.actions.push(ShedAction {
                at_s,
                action: "stopped CPU sampling".into(),
                why,
            });
            return Step::StopSampling;
        }
        let hottest = hits
            .into_iter()
            .filter(|(name, _)| !self.excluded.contains(name))
            .max_by_key(|(_, n)| *n);
        match hottest {
            Some((name, n)) if n > 0 => {
                self.excluded.push(name.clone());
                self.actions.push(ShedAction {
                    at_s,
                    action: format!(
                        "stopped probing {name} ({n} calls in the last {} s)",
                        budget.patience
                    ),
                    why,
                });
                Step::DropFunction(name)
            }
            _ => {
                if !self.exhausted {
                    self.exhausted = true;
                    self.actions.push(ShedAction {
                        at_s,
                        action: "nothing left to shed (system calls and lifecycle stay)".into(),
                        why,
                    });
                }
                Step::Nothing
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::config::Size;

    fn budget() -> BudgetSection {
        BudgetSection {
            max_events_per_second: 1000,
            max_cpu_percent: 0.0,
            max_memory: Size(0),
            patience: 2,
        }
    }

    fn usage(rate: f64) -> Usage {
        Usage {
            events_per_s: rate,
            ..Usage::default()
        }
    }

    #[test]
    fn samples_go_first_then_the_hottest_function() {
        let mut shed = Shed::new();
        let b = budget();
        shed.add_hits([("cold".to_string(), 5), ("hot".to_string(), 900)]);
        assert_eq!(
            shed.decide(&usage(5000.0), &b, true, 1.0),
            Step::Nothing,
            "patience"
        );
        assert_eq!(
            shed.decide(&usage(5000.0), &b, true, 2.0),
            Step::StopSampling
        );
        shed.add_hits([("cold".to_string(), 5), ("hot".to_string(), 900)]);
        assert_eq!(shed.decide(&usage(5000.0), &b, true, 3.0), Step::Nothing);
        assert_eq!(
            shed.decide(&usage(5000.0), &b, true, 4.0),
            Step::DropFunction("hot".into())
        );
        assert_eq!(shed.excluded, ["hot"]);
        assert_eq!(shed.actions.len(), 2);
        assert!(
            shed.actions[1].why.contains("events/s"),
            "{:?}",
            shed.actions[1]
        );
    }

    #[test]
    fn a_second_under_budget_resets_patience() {
        let mut shed = Shed::new();
        let b = budget();
        shed.add_hits([("f".to_string(), 10)]);
        assert_eq!(shed.decide(&usage(5000.0), &b, false, 1.0), Step::Nothing);
        assert_eq!(shed.decide(&usage(10.0), &b, false, 2.0), Step::Nothing);
        shed.add_hits([("f".to_string(), 10)]);
        assert_eq!(shed.decide(&usage(5000.0), &b, false, 3.0), Step::Nothing);
        assert_eq!(
            shed.decide(&usage(5000.0), &b, false, 4.0),
            Step::DropFunction("f".into())
        );
        assert_eq!(shed.decide(&usage(5000.0), &b, false, 5.0), Step::Nothing);
        assert_eq!(
            shed.decide(&usage(5000.0), &b, false, 6.0),
            Step::Nothing,
            "exhausted"
        );
        assert_eq!(shed.actions.len(), 2, "exhaustion is reported once");
    }

    #[test]
    fn memory_over_budget_drops_preambles() {
        let mut shed = Shed::new();
        let b = BudgetSection {
            max_memory: Size(1 << 20),
            ..budget()
        };
        let u = Usage {
            rss_bytes: 2 << 20,
            ..Usage::default()
        };
        assert_eq!(shed.decide(&u, &b, false, 1.0), Step::DropPreambles);
        assert_eq!(shed.decide(&u, &b, false, 2.0), Step::Nothing, "once");
    }

    #[test]
    fn the_meter_reads_this_process() {
        let mut m = Meter::new(0);
        // Too soon after the start: no reading, and the interval goes on.
        let u = m.measure(3);
        assert_eq!(u.events_per_s, 0.0, "{u:?}");
        std::thread::sleep(std::time::Duration::from_secs_f64(MIN_INTERVAL_S));
        let u = m.measure(100);
        assert!(u.rss_bytes > 1 << 20, "{u:?}");
        assert!(u.events_per_s > 0.0 && u.events_per_s <= 200.0, "{u:?}");
    }
}
