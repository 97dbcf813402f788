//! Collecting figures and printing the side-by-side table.

use std::collections::BTreeMap;

use crate::servers::Kind;

/// Whether a bigger figure is better.
#[derive(Clone, Copy)]
pub enum Better {
    Lower,
    Higher,
}

pub struct Row {
    pub label: String,
    pub better: Better,
    /// One figure per round, per server.
    pub values: BTreeMap<Kind, Vec<f64>>,
    /// The same workload with no server at all.
    pub ceiling: Option<f64>,
    /// Runs that failed, per server, with why.
    pub failures: BTreeMap<Kind, Vec<String>>,
    /// What Tether should reach here, printed beside the ratio (or in a column of its own).
    pub target: Option<Target>,
}

/// What Tether should reach on a row, judged on the medians.
#[derive(Clone, Copy)]
pub enum Target {
    /// Where lower is better: at most this fraction of the reference's figure, and at most
    /// this figure, in the unit given.
    AtMost { of_reference: f64, at_most: Option<(f64, &'static str)> },
    /// At least this many times better than the figure Tether is compared with: that many
    /// times more where higher is better, that many times less where lower is.
    TimesBetter(f64),
}

impl Target {
    /// `target ≤ 0.25× the reference and ≤ 20 ms` or `target ≥ 1.5× scp` (`other` names what
    /// Tether is compared with), then `: met` or `: missed` when the medians it needs are known
    /// (only the absolute bound without the reference's).
    fn describe(&self, row: &Row, other: &str) -> String {
        let (text, met) = match *self {
            Target::AtMost { of_reference, at_most } => {
                let (tether, reference) =
                    (row.median_of(Kind::Tether), row.median_of(Kind::Reference));
                let mut text = format!("target ≤ {of_reference}× the reference");
                let mut met = match (tether, reference) {
                    (Some(t), Some(r)) => Some(t <= of_reference * r),
                    _ => None,
                };
                if let Some((bound, unit)) = at_most {
                    text.push_str(&format!(" and ≤ {bound} {unit}"));
                    met = tether.map(|t| t <= bound && met != Some(false));
                }
                (text, met)
            }
            Target::TimesBetter(times) => {
                (format!("target ≥ {times}× {other}"), row.times_better().map(|t| t >= times))
            }
        };
        match met {
            Some(true) => format!("{text}: met"),
            Some(false) => format!("{text}: missed"),
            None => text,
        }
    }
}

impl Row {
    pub fn new(label: &str, better: Better) -> Self {
        Self {
            label: label.to_owned(),
            better,
            values: BTreeMap::new(),
            ceiling: None,
            failures: BTreeMap::new(),
            target: None,
        }
    }

    fn median_of(&self, kind: Kind) -> Option<f64> {
        self.values.get(&kind).map(|v| median(&mut v.clone()))
    }

    fn spread_of(&self, kind: Kind) -> Option<(f64, f64)> {
        let values = self.values.get(&kind)?;
        let min = values.iter().copied().fold(f64::INFINITY, f64::min);
        let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        Some((min, max))
    }

    /// How many times better Tether's median is than the other's: more where higher is
    /// better, less where lower is.
    fn times_better(&self) -> Option<f64> {
        match (self.median_of(Kind::Tether), self.median_of(Kind::Reference)) {
            (Some(t), Some(r)) if t > 0.0 && r > 0.0 => Some(match self.better {
                Better::Lower => r / t,
                Better::Higher => t / r,
            }),
            _ => None,
        }
    }
}

/// Rows side by side: Tether's figures (`Kind::Tether`) and those it is compared with
/// (`Kind::Reference`: the reference, or another tool doing the same work).
pub struct Table {
    rows: Vec<Row>,
    /// The names of the two figures' columns.
    names: [&'static str; 2],
    last: LastColumn,
}

/// What a table's last column holds.
enum LastColumn {
    /// The machine's ceiling; a row's target then follows its ratio.
    Ceiling,
    /// The row's target: a table whose rows have no ceiling.
    Target,
}

/// Tether against the reference, with the machine's ceiling.
impl Default for Table {
    fn default() -> Self {
        Self { rows: Vec::new(), names: ["Tether", "reference"], last: LastColumn::Ceiling }
    }
}

impl Table {
    /// Tether, as `tether` names it, against `other` (its figures under `Kind::Reference`),
    /// with each row's target in the last column.
    pub fn versus(tether: &'static str, other: &'static str) -> Self {
        Self { rows: Vec::new(), names: [tether, other], last: LastColumn::Target }
    }

    pub fn push(&mut self, row: Row) {
        self.rows.push(row);
    }

    /// A Markdown table: each side's median (min–max over rounds), how much better Tether is,
    /// and the machine's ceiling with the target after the ratio, or the target alone. Nothing
    /// for a table with no rows.
    pub fn print(&self, kinds: &[Kind]) {
        if self.rows.is_empty() {
            return;
        }
        let [tether, other] = self.names;
        let last = match self.last {
            LastColumn::Ceiling => "ceiling (no server)",
            LastColumn::Target => "target",
        };
        println!();
        println!("| workload | {tether} | {other} | {tether} vs {other} | {last} |");
        println!("|---|---|---|---|---|");
        for row in &self.rows {
            let cell = |kind: Kind| {
                let failed = row.failures.get(&kind).map_or(0, Vec::len);
                let figure = match (row.median_of(kind), row.spread_of(kind)) {
                    (Some(median), Some((min, max))) => {
                        format!("{} ({}–{})", fmt(median), fmt(min), fmt(max))
                    }
                    _ => "–".to_owned(),
                };
                if failed > 0 { format!("{figure}; {failed} run(s) failed") } else { figure }
            };
            let ratio = match row.times_better() {
                Some(times) => match row.better {
                    Better::Lower => format!("{times:.1}× less"),
                    Better::Higher => format!("{times:.1}× more"),
                },
                None => "–".to_owned(),
            };
            let target = row.target.map(|target| target.describe(row, other));
            let (ratio, last) = match self.last {
                LastColumn::Ceiling => {
                    let ratio = match target {
                        Some(target) => format!("{ratio}; {target}"),
                        None => ratio,
                    };
                    (ratio, row.ceiling.map_or("–".to_owned(), fmt))
                }
                LastColumn::Target => (ratio, target.unwrap_or_else(|| "–".to_owned())),
            };
            let compared =
                if kinds.contains(&Kind::Reference) { cell(Kind::Reference) } else { "–".into() };
            println!(
                "| {} | {} | {} | {} | {} |",
                row.label,
                cell(Kind::Tether),
                compared,
                ratio,
                last
            );
        }
    }
}

fn fmt(value: f64) -> String {
    if value >= 100.0 {
        format!("{value:.0}")
    } else if value >= 10.0 {
        format!("{value:.1}")
    } else if value >= 0.1 {
        format!("{value:.2}")
    } else {
        format!("{value:.4}")
    }
}

pub fn median(values: &mut [f64]) -> f64 {
    values.sort_by(|a, b| a.total_cmp(b));
    match values.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}
