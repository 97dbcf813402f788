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
    /// What Tether should reach here, printed beside the ratio.
    pub target: Option<Target>,
}

/// The target for Tether on a row where lower is better, judged on the medians.
#[derive(Clone, Copy)]
pub struct Target {
    /// At most this fraction of the reference's figure.
    pub of_reference: f64,
    /// At most this figure, in the unit given.
    pub at_most: Option<(f64, &'static str)>,
}

impl Target {
    /// `target ≤ 0.25× the reference and ≤ 20 ms`, then `: met` or `: missed` when both medians
    /// are known (only the absolute bound without the reference's).
    fn describe(&self, tether: Option<f64>, reference: Option<f64>) -> String {
        let mut text = format!("target ≤ {}× the reference", self.of_reference);
        let mut met = match (tether, reference) {
            (Some(t), Some(r)) => Some(t <= self.of_reference * r),
            _ => None,
        };
        if let Some((bound, unit)) = self.at_most {
            text.push_str(&format!(" and ≤ {bound} {unit}"));
            met = tether.map(|t| t <= bound && met != Some(false));
        }
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
}

#[derive(Default)]
pub struct Table {
    rows: Vec<Row>,
}

impl Table {
    pub fn push(&mut self, row: Row) {
        self.rows.push(row);
    }

    /// A Markdown table: each server's median (min–max over rounds), how much better Tether is
    /// (with the target, where there is one), and the machine's ceiling.
    pub fn print(&self, kinds: &[Kind]) {
        println!();
        println!("| workload | Tether | reference | Tether vs reference | ceiling (no server) |");
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
            let ratio = match (row.median_of(Kind::Tether), row.median_of(Kind::Reference)) {
                (Some(t), Some(r)) if t > 0.0 && r > 0.0 => match row.better {
                    Better::Lower => format!("{:.1}× less", r / t),
                    Better::Higher => format!("{:.1}× more", t / r),
                },
                _ => "–".to_owned(),
            };
            let ratio = match &row.target {
                Some(target) => {
                    let (tether, reference) =
                        (row.median_of(Kind::Tether), row.median_of(Kind::Reference));
                    format!("{ratio}; {}", target.describe(tether, reference))
                }
                None => ratio,
            };
            let reference =
                if kinds.contains(&Kind::Reference) { cell(Kind::Reference) } else { "–".into() };
            let ceiling = row.ceiling.map_or("–".to_owned(), fmt);
            println!(
                "| {} | {} | {} | {} | {} |",
                row.label,
                cell(Kind::Tether),
                reference,
                ratio,
                ceiling
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
