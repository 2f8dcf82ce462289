//! The throughput timeline as a hand-written SVG: completed operations
//! per second of virtual time for the three sessions, faults as labelled
//! vertical lines, their later steps (re-plug, ...) as faint ones.

use std::fmt::Write as _;

use super::report::{MarkerKind, Throughput};

const W: f64 = 1100.0;
const H: f64 = 420.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 30.0;
const TOP: f64 = 50.0;
const BOTTOM: f64 = 60.0;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A round step (1, 2 or 5 times a power of ten) near `span / parts`.
fn nice_step(span: f64, parts: f64) -> f64 {
    let raw = (span / parts).max(1e-9);
    let mag = 10f64.powf(raw.log10().floor());
    let n = raw / mag;
    let m = if n < 1.5 {
        1.0
    } else if n < 3.0 {
        2.0
    } else if n < 7.0 {
        5.0
    } else {
        10.0
    };
    m * mag
}

fn human(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.0}k", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}

/// Render `t` with `title`.
pub fn render(t: &Throughput, title: &str) -> String {
    let n = t.a.len().max(t.b.len()).max(t.c.len()).max(1);
    let span = n as f64 * t.bucket_s;
    let rate = |c: u64| c as f64 / t.bucket_s;
    let peak =
        t.a.iter()
            .chain(&t.b)
            .chain(&t.c)
            .copied()
            .map(rate)
            .fold(0.0, f64::max)
            .max(1.0);
    // Head room above the highest curve for the fault labels.
    let step = nice_step(peak * 1.6, 5.0);
    let top = (peak * 1.6 / step).ceil() * step;
    let pw = W - LEFT - RIGHT;
    let ph = H - TOP - BOTTOM;
    let x = |s: f64| LEFT + s / span * pw;
    let y = |v: f64| TOP + ph - v / top * ph;

    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{LEFT}" y="22" font-size="15" font-weight="bold">{}</text>"#,
        esc(title)
    );
    // Grid and y axis.
    let mut v = 0.0;
    while v <= top + step / 2.0 {
        let yy = y(v);
        let _ = writeln!(
            s,
            r##"<line x1="{LEFT}" y1="{yy:.1}" x2="{:.1}" y2="{yy:.1}" stroke="#e5e5e5"/><text x="{:.1}" y="{:.1}" text-anchor="end" fill="#555">{}</text>"##,
            W - RIGHT,
            LEFT - 6.0,
            yy + 4.0,
            human(v)
        );
        v += step;
    }
    let _ = writeln!(
        s,
        r##"<text transform="translate(18 {:.1}) rotate(-90)" text-anchor="middle" fill="#333">completed operations / s</text>"##,
        TOP + ph / 2.0
    );
    // x axis: a tick per second (or coarser).
    let tick = nice_step(span, 10.0);
    let mut sec = 0.0;
    while sec <= span + 1e-9 {
        let xx = x(sec);
        let _ = writeln!(
            s,
            r##"<line x1="{xx:.1}" y1="{:.1}" x2="{xx:.1}" y2="{:.1}" stroke="#999"/><text x="{xx:.1}" y="{:.1}" text-anchor="middle" fill="#555">{sec:.1} s</text>"##,
            TOP + ph,
            TOP + ph + 5.0,
            TOP + ph + 19.0
        );
        sec += tick;
    }
    let _ = writeln!(
        s,
        r##"<text x="{:.1}" y="{:.1}" text-anchor="middle" fill="#333">virtual time since the workload started</text>"##,
        LEFT + pw / 2.0,
        H - 14.0
    );
    let _ = writeln!(
        s,
        r##"<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>"##
    );
    // Fault markers under the curves.
    for m in &t.markers {
        let xx = x(m.at_s);
        if m.kind == MarkerKind::Event {
            let _ = writeln!(
                s,
                r##"<g><title>{}</title><line x1="{xx:.1}" y1="{:.1}" x2="{xx:.1}" y2="{:.1}" stroke="#ff7f0e" stroke-width="2"/><text x="{:.1}" y="{:.1}" fill="#b35900">{}</text></g>"##,
                esc(&m.detail),
                TOP + ph * 0.72,
                TOP + ph,
                xx + 4.0,
                TOP + ph * 0.72 + 12.0,
                esc(&m.label)
            );
        } else if m.kind == MarkerKind::Fault {
            let _ = writeln!(
                s,
                r##"<g><title>{}</title><line x1="{xx:.1}" y1="{TOP}" x2="{xx:.1}" y2="{:.1}" stroke="#d62728" stroke-dasharray="5,3"/><text transform="translate({:.1} {:.1}) rotate(90)" fill="#d62728">{}</text></g>"##,
                esc(&m.detail),
                TOP + ph,
                xx + 4.0,
                TOP + 6.0,
                esc(&m.label)
            );
        } else {
            let _ = writeln!(
                s,
                r##"<line x1="{xx:.1}" y1="{TOP}" x2="{xx:.1}" y2="{:.1}" stroke="#d62728" stroke-opacity="0.3" stroke-dasharray="2,3"><title>{}</title></line>"##,
                TOP + ph,
                esc(&m.label)
            );
        }
    }
    // The curves.
    for (series, color, name) in [
        (&t.a, "#1f77b4", "session A"),
        (&t.b, "#ff7f0e", "session B"),
        (&t.c, "#2ca02c", "session C"),
    ] {
        if series.is_empty() {
            continue;
        }
        let mut pts = String::new();
        for (i, c) in series.iter().enumerate() {
            let _ = write!(
                pts,
                "{:.1},{:.1} ",
                x((i as f64 + 0.5) * t.bucket_s),
                y(rate(*c))
            );
        }
        let _ = writeln!(
            s,
            r#"<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{}"><title>{name}</title></polyline>"#,
            pts.trim_end()
        );
    }
    // Legend.
    let lx = W - RIGHT - 250.0;
    for (i, (color, name)) in [
        ("#1f77b4", "session A (2 paths)"),
        ("#ff7f0e", "session B (1 path, gives up)"),
        ("#2ca02c", "session C (2 paths, manual recovery)"),
    ]
    .iter()
    .enumerate()
    {
        let ly = 12.0 + i as f64 * 14.0;
        let _ = writeln!(
            s,
            r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{color}" stroke-width="3"/><text x="{}" y="{}">{name}</text>"#,
            lx + 24.0,
            lx + 30.0,
            ly + 4.0
        );
    }
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::demo::report::Marker;

    #[test]
    fn renders_well_formed_svg_with_markers() {
        let t = Throughput {
            bucket_s: 0.1,
            a: vec![10, 20, 0, 30],
            b: vec![1, 1, 1, 0],
            c: vec![2, 0, 2, 2],
            markers: vec![Marker {
                at_s: 0.2,
                label: "reset <soft0>".into(),
                detail: "a & b".into(),
                kind: MarkerKind::Fault,
            }],
        };
        let svg = render(&t, "demo & test");
        assert!(svg.starts_with("<svg"));
        assert!(svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("reset &lt;soft0&gt;"));
        assert!(svg.contains("demo &amp; test"));
        assert_eq!(svg.matches("<polyline").count(), 3);
    }
}
