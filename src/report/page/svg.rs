//! The report page's charts, drawn as inline SVG by wai itself.
//!
//! Why not a charting library: the page must open from disk with no network, so a library
//! would be inlined whole (tens to hundreds of KB of JavaScript for five chart kinds), and its
//! charts would exist only once a script ran. These are a few hundred lines, drawn once when the
//! page is written, readable without JavaScript, and every mark carries its numbers as text: a
//! label beside it and a `<title>` (a tooltip on hover, read by screen readers), so no figure
//! is told by colour alone.

use std::fmt::Write as _;

/// The drawing width, in SVG units (the SVG scales to its container).
const WIDTH: f64 = 1000.0;
/// One row of a forest plot, a bar chart or a funnel.
const ROW: f64 = 24.0;
/// Room above and below the rows (the axis labels).
const PAD: f64 = 28.0;

/// `text` safe inside an SVG (XML) text node or attribute.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            // XML 1.0 has no other control characters.
            c if (c as u32) < 0x20 && !matches!(c, '\t' | '\n' | '\r') => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// `text` cut to `max` characters, with an ellipsis when cut.
fn clip(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_owned()
    } else {
        let mut s: String = text.chars().take(max.saturating_sub(1)).collect();
        s.push('…');
        s
    }
}

/// A number as the page prints it: three decimals at most, no trailing zeros.
pub(crate) fn num(x: f64) -> String {
    let s = format!("{x:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" {
        "0".to_owned()
    } else {
        s.to_owned()
    }
}

/// `0.72 [0.69, 0.75]`, or `n/a`.
pub(crate) fn with_interval(estimate: Option<f64>, interval: Option<[f64; 2]>) -> String {
    match (estimate, interval) {
        (Some(e), Some([lo, hi])) => format!("{} [{}, {}]", num(e), num(lo), num(hi)),
        (Some(e), None) => num(e),
        (None, _) => "n/a".to_owned(),
    }
}

/// The x of value `v` on an axis from `lo` to `hi` drawn between `left` and `right`.
fn scale(v: f64, (lo, hi): (f64, f64), (left, right): (f64, f64)) -> f64 {
    let t = if hi > lo { (v - lo) / (hi - lo) } else { 0.5 };
    left + t.clamp(0.0, 1.0) * (right - left)
}

/// Opens an SVG of `height` with its accessible name.
fn open(out: &mut String, class: &str, height: f64, label: &str) {
    let _ = write!(
        out,
        r#"<svg class="chart {class}" viewBox="0 0 {WIDTH} {height}" role="img" aria-label="{}" xmlns="http://www.w3.org/2000/svg">"#,
        escape(label)
    );
}

/// A vertical axis' ticks and grid lines, with their labels under the plot.
fn x_axis(out: &mut String, domain: (f64, f64), span: (f64, f64), top: f64, bottom: f64) {
    let (lo, hi) = domain;
    let steps = 4;
    for i in 0..=steps {
        let v = lo + (hi - lo) * f64::from(i) / f64::from(steps);
        let x = scale(v, domain, span);
        let _ = write!(
            out,
            r#"<line class="grid" x1="{x:.1}" x2="{x:.1}" y1="{top:.1}" y2="{bottom:.1}"/><text class="tick" x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            bottom + 14.0,
            num(v)
        );
    }
}

/// One line of a forest plot: an estimate with its interval.
#[derive(Debug, Clone)]
pub(crate) struct Estimate {
    /// What the line is (a slice value, a marker, a metric).
    pub label: String,
    /// The estimate; a line without one is drawn as `n/a`.
    pub value: Option<f64>,
    /// Its 95% interval.
    pub interval: Option<[f64; 2]>,
    /// The count behind it, as words (`42 tasks`).
    pub n: String,
    /// A key the page's script can find the mark by (`data-key`).
    pub key: String,
}

/// A forest plot: one mark per estimate (a dot and its interval), labelled with the label, the
/// numbers and n, over an axis spanning `domain`; `reference` draws a dashed line (the overall
/// value) and `band` a shaded range (a noise band).
pub(crate) fn forest(
    rows: &[Estimate],
    domain: (f64, f64),
    reference: Option<(f64, &str)>,
    band: Option<[f64; 2]>,
    label: &str,
) -> String {
    let height = PAD * 2.0 + ROW * rows.len().max(1) as f64;
    let span = (250.0, WIDTH - 270.0);
    let (top, bottom) = (PAD - 8.0, height - PAD + 4.0);
    let mut out = String::new();
    open(&mut out, "forest", height, label);
    if let Some([lo, hi]) = band {
        let (x0, x1) = (scale(lo, domain, span), scale(hi, domain, span));
        let _ = write!(
            out,
            r#"<rect class="band" x="{x0:.1}" y="{top:.1}" width="{:.1}" height="{:.1}"><title>noise band {} to {}</title></rect>"#,
            (x1 - x0).max(1.0),
            bottom - top,
            num(lo),
            num(hi)
        );
    }
    x_axis(&mut out, domain, span, top, bottom);
    if let Some((r, name)) = reference {
        let x = scale(r, domain, span);
        let _ = write!(
            out,
            r#"<line class="reference" x1="{x:.1}" x2="{x:.1}" y1="{top:.1}" y2="{bottom:.1}"><title>{} {}</title></line>"#,
            escape(name),
            num(r)
        );
    }
    for (i, row) in rows.iter().enumerate() {
        let y = PAD + ROW * (i as f64 + 0.5);
        let numbers = with_interval(row.value, row.interval);
        let _ = write!(
            out,
            r#"<g class="mark" data-key="{}"><title>{}: {} (n = {})</title><text class="label" x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
            escape(&row.key),
            escape(&row.label),
            numbers,
            escape(&row.n),
            span.0 - 10.0,
            y + 4.0,
            escape(&clip(&row.label, 30))
        );
        if let Some([lo, hi]) = row.interval {
            let _ = write!(
                out,
                r#"<line class="ci" x1="{:.1}" x2="{:.1}" y1="{y:.1}" y2="{y:.1}"/>"#,
                scale(lo, domain, span),
                scale(hi, domain, span)
            );
        }
        if let Some(v) = row.value {
            let _ = write!(
                out,
                r#"<circle class="dot" cx="{:.1}" cy="{y:.1}" r="4.5"/>"#,
                scale(v, domain, span)
            );
        }
        let _ = write!(
            out,
            r#"<text class="value" x="{:.1}" y="{:.1}">{} · {}</text></g>"#,
            span.1 + 10.0,
            y + 4.0,
            numbers,
            escape(&row.n)
        );
    }
    out.push_str("</svg>");
    out
}

/// One cell of a heat map.
#[derive(Debug, Clone)]
pub(crate) struct Cell {
    /// Its row and column.
    pub row: usize,
    pub col: usize,
    /// The share that colours it, in [0, 1].
    pub share: f64,
    /// What is written in it.
    pub text: String,
    /// The tooltip: the numbers with their interval.
    pub title: String,
}

/// A heat map of `rows` × `cols`; a cell's shade is its share (darker is higher) and its text
/// says the number, so the map reads without colour.
pub(crate) fn heat_map(rows: &[String], cols: &[String], cells: &[Cell], label: &str) -> String {
    let (left, cell_w, cell_h, head) = (170.0, 118.0, 30.0, 26.0);
    let width = (left + cell_w * cols.len() as f64).max(WIDTH);
    let height = head + cell_h * rows.len() as f64 + 8.0;
    let mut out = String::new();
    let _ = write!(
        out,
        r#"<svg class="chart heat" viewBox="0 0 {width:.0} {height:.0}" role="img" aria-label="{}" xmlns="http://www.w3.org/2000/svg">"#,
        escape(label)
    );
    for (j, col) in cols.iter().enumerate() {
        let _ = write!(
            out,
            r#"<text class="col" x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            left + cell_w * (j as f64 + 0.5),
            head - 8.0,
            escape(&clip(col, 16))
        );
    }
    for (i, row) in rows.iter().enumerate() {
        let _ = write!(
            out,
            r#"<text class="label" x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
            left - 10.0,
            head + cell_h * (i as f64 + 0.5) + 4.0,
            escape(&clip(row, 24))
        );
    }
    for cell in cells {
        let (x, y) = (
            left + cell_w * cell.col as f64,
            head + cell_h * cell.row as f64,
        );
        // Light to dark blue: lightness from 96% down to 30%; text flips to white on dark.
        let share = cell.share.clamp(0.0, 1.0);
        let lightness = 96.0 - 66.0 * share;
        let ink = if lightness < 58.0 { "light" } else { "dark" };
        let _ = write!(
            out,
            r#"<g class="cell"><title>{}</title><rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="hsl(212, 70%, {lightness:.0}%)"/><text class="{ink}" x="{:.1}" y="{:.1}" text-anchor="middle">{}</text></g>"#,
            escape(&cell.title),
            x + 1.0,
            y + 1.0,
            cell_w - 2.0,
            cell_h - 2.0,
            x + cell_w / 2.0,
            y + cell_h / 2.0 + 4.0,
            escape(&cell.text)
        );
    }
    out.push_str("</svg>");
    out
}

/// One bar of a bar chart.
#[derive(Debug, Clone)]
pub(crate) struct Bar {
    /// What it is.
    pub label: String,
    /// Its length (may be negative when the domain allows).
    pub value: f64,
    /// Written after the bar.
    pub text: String,
    /// The tooltip.
    pub title: String,
    /// Drawn in the stronger colour (above its floor, kept, failing).
    pub strong: bool,
}

/// Horizontal bars over `domain`, from zero; `floor` draws a dashed line at a value on each
/// side of zero (a permutation floor: |ρ| under it is noise).
pub(crate) fn bars(bars: &[Bar], domain: (f64, f64), floor: Option<f64>, label: &str) -> String {
    let height = PAD * 2.0 + ROW * bars.len().max(1) as f64;
    let span = (250.0, WIDTH - 230.0);
    let (top, bottom) = (PAD - 8.0, height - PAD + 4.0);
    let mut out = String::new();
    open(&mut out, "bars", height, label);
    x_axis(&mut out, domain, span, top, bottom);
    if let Some(f) = floor {
        for v in [f, -f] {
            if v >= domain.0 && v <= domain.1 {
                let x = scale(v, domain, span);
                let _ = write!(
                    out,
                    r#"<line class="floor" x1="{x:.1}" x2="{x:.1}" y1="{top:.1}" y2="{bottom:.1}"><title>permutation floor {}</title></line>"#,
                    num(v)
                );
            }
        }
    }
    let zero = scale(0.0_f64.clamp(domain.0, domain.1), domain, span);
    for (i, bar) in bars.iter().enumerate() {
        let y = PAD + ROW * i as f64 + 4.0;
        let x = scale(bar.value, domain, span);
        let (x0, w) = if x >= zero {
            (zero, x - zero)
        } else {
            (x, zero - x)
        };
        let _ = write!(
            out,
            r#"<g class="bar{}"><title>{}</title><text class="label" x="{:.1}" y="{:.1}" text-anchor="end">{}</text><rect x="{x0:.1}" y="{y:.1}" width="{:.1}" height="{:.1}"/><text class="value" x="{:.1}" y="{:.1}">{}</text></g>"#,
            if bar.strong { " strong" } else { "" },
            escape(&bar.title),
            span.0 - 10.0,
            y + ROW / 2.0,
            escape(&clip(&bar.label, 30)),
            w.max(1.0),
            ROW - 8.0,
            span.1 + 10.0,
            y + ROW / 2.0,
            escape(&bar.text)
        );
    }
    out.push_str("</svg>");
    out
}

/// A point of a trend line: (run index, value, interval, tooltip).
pub(crate) type Point = (usize, f64, Option<[f64; 2]>, String);

/// One line of a trend chart: a value per run, with its interval.
#[derive(Debug, Clone)]
pub(crate) struct Series {
    /// The line's name (a slice).
    pub name: String,
    /// Its points.
    pub points: Vec<Point>,
}

/// Lines over runs: `runs` names the x positions, each series is a line with its interval as a
/// band, named at its end.
pub(crate) fn trend(runs: &[String], series: &[Series], domain: (f64, f64), label: &str) -> String {
    // A panel of a small-multiples grid: narrow, its name in its caption.
    let (width, height) = (480.0, 220.0);
    let (left, right, top, bottom) = (44.0, width - 56.0, 12.0, height - 40.0);
    let x_of = |i: usize| {
        if runs.len() <= 1 {
            f64::midpoint(left, right)
        } else {
            left + (right - left) * i as f64 / (runs.len() - 1) as f64
        }
    };
    let y_of = |v: f64| scale(v, domain, (bottom, top));
    let mut out = String::new();
    let _ = write!(
        out,
        r#"<svg class="chart trend" viewBox="0 0 {width} {height}" role="img" aria-label="{}" xmlns="http://www.w3.org/2000/svg">"#,
        escape(label)
    );
    for i in 0..=4 {
        let v = domain.0 + (domain.1 - domain.0) * f64::from(i) / 4.0;
        let y = y_of(v);
        let _ = write!(
            out,
            r#"<line class="grid" x1="{left:.1}" x2="{right:.1}" y1="{y:.1}" y2="{y:.1}"/><text class="tick" x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
            left - 6.0,
            y + 4.0,
            num(v)
        );
    }
    // At most 4 run labels under the axis, evenly spread.
    let every = runs.len().div_ceil(4).max(1);
    for (i, run) in runs.iter().enumerate() {
        if i % every == 0 || i + 1 == runs.len() {
            let _ = write!(
                out,
                r#"<text class="tick" x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
                x_of(i),
                bottom + 18.0,
                escape(&clip(run, 14))
            );
        }
    }
    for (s, line) in series.iter().enumerate() {
        let class = format!("series s{}", s % 8);
        let _ = write!(
            out,
            r#"<g class="{class}" data-key="{}">"#,
            escape(&line.name)
        );
        let banded: Vec<_> = line
            .points
            .iter()
            .filter_map(|(i, _, ci, _)| ci.map(|c| (*i, c)))
            .collect();
        if banded.len() > 1 {
            let mut d = String::new();
            for (j, (i, [_, hi])) in banded.iter().enumerate() {
                let _ = write!(
                    d,
                    "{}{:.1},{:.1}",
                    if j == 0 { "M" } else { " L" },
                    x_of(*i),
                    y_of(*hi)
                );
            }
            for (i, [lo, _]) in banded.iter().rev() {
                let _ = write!(d, " L{:.1},{:.1}", x_of(*i), y_of(*lo));
            }
            let _ = write!(out, r#"<path class="band" d="{d} Z"/>"#);
        }
        let mut d = String::new();
        for (j, (i, v, _, _)) in line.points.iter().enumerate() {
            let _ = write!(
                d,
                "{}{:.1},{:.1}",
                if j == 0 { "M" } else { " L" },
                x_of(*i),
                y_of(*v)
            );
        }
        let _ = write!(out, r#"<path class="line" d="{d}"/>"#);
        for (i, v, _, title) in &line.points {
            let _ = write!(
                out,
                r#"<circle class="point" cx="{:.1}" cy="{:.1}" r="3.5"><title>{}</title></circle>"#,
                x_of(*i),
                y_of(*v),
                escape(title)
            );
        }
        if let Some((i, v, _, _)) = line.points.last() {
            let _ = write!(
                out,
                r#"<text class="label" x="{:.1}" y="{:.1}">{}</text>"#,
                x_of(*i) + 8.0,
                y_of(*v) + 4.0,
                num(*v)
            );
        }
        out.push_str("</g>");
    }
    out.push_str("</svg>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn estimate(label: &str, v: f64) -> Estimate {
        Estimate {
            label: label.into(),
            value: Some(v),
            interval: Some([v - 0.1, v + 0.1]),
            n: "10 tasks".into(),
            key: label.into(),
        }
    }

    #[test]
    fn a_forest_plot_has_one_mark_per_line_with_its_numbers_as_text() {
        let svg = forest(
            &[estimate("easy", 0.9), estimate("hard", 0.4)],
            (0.0, 1.0),
            Some((0.65, "overall")),
            None,
            "pass@1 by tier",
        );
        assert_eq!(svg.matches(r#"<g class="mark""#).count(), 2);
        assert!(svg.contains("0.9 [0.8, 1]"), "{svg}");
        assert!(svg.contains("hard: 0.4 [0.3, 0.5] (n = 10 tasks)"));
        assert!(svg.contains(r#"aria-label="pass@1 by tier""#));
    }

    #[test]
    fn hostile_labels_are_escaped() {
        let svg = forest(
            &[estimate("<script>alert(1)</script>", 0.5)],
            (0.0, 1.0),
            None,
            None,
            "a\"b",
        );
        assert!(!svg.contains("<script>"));
        assert!(svg.contains("&lt;script&gt;"));
        assert!(svg.contains("aria-label=\"a&quot;b\""));
        assert_eq!(escape("a\u{1}b"), "a b");
    }

    #[test]
    fn numbers_are_short_and_never_negative_zero() {
        assert_eq!(num(0.5), "0.5");
        assert_eq!(num(1.0), "1");
        assert_eq!(num(-0.0001), "0");
        assert_eq!(num(0.123_456), "0.123");
        assert_eq!(with_interval(None, None), "n/a");
    }

    #[test]
    fn a_heat_map_writes_each_cells_number() {
        let svg = heat_map(
            &["lookup".into()],
            &["ordinary".into(), "hard".into()],
            &[Cell {
                row: 0,
                col: 1,
                share: 0.9,
                text: "0.9 (9/10)".into(),
                title: "fail rate 0.9 [0.6, 0.98]".into(),
            }],
            "failures",
        );
        assert_eq!(svg.matches(r#"<g class="cell">"#).count(), 1);
        assert!(svg.contains("0.9 (9/10)") && svg.contains("class=\"light\""));
    }
}
