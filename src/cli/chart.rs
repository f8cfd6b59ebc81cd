//! SVG charts for `plan-quant --svg` and the HTML report: bars of one value
//! per tensor, grouped by layer (`blk.N`) and coloured by ggml type with a
//! legend; and a ladder's quality against its size, one labelled point per
//! model. Every name escaped, every canvas wide enough for its title.

use std::borrow::Cow;
use std::fmt::Write as _;

use crate::types::GgmlType;

/// One tensor's bar.
pub(super) struct Bar<'a> {
    pub name: &'a str,
    /// Its ggml type's name: the bar's colour.
    pub ty: &'a str,
    /// The `blk.N` block it belongs to; `None` groups under "other".
    pub block: Option<u64>,
    pub value: f64,
}

/// How values map to bar heights.
#[derive(Clone, Copy)]
pub(super) enum Scale {
    /// Bits per weight, by powers of two from 1 to 32: 2-bit and 4-bit
    /// types as far apart as 16-bit and 32-bit ones.
    Bits,
    /// Decades spanning the positive values (errors span several).
    Log,
}

const BAR: f64 = 4.0;
const GAP: f64 = 8.0;
const HEIGHT: f64 = 200.0;
const TOP: f64 = 28.0;
const LEFT: f64 = 52.0;
const LEGEND_ITEM: f64 = 64.0;
/// A generous width per character of 11-pixel sans-serif text.
const CHAR_WIDTH: f64 = 6.6;

/// The chart: `title` on top, `axis` naming the value, one group of bars
/// per layer in block order, "other" last.
pub(super) fn by_layer(title: &str, axis: &str, scale: Scale, bars: &[Bar]) -> String {
    let mut layers: Vec<Option<u64>> = bars.iter().map(|b| b.block).collect();
    layers.sort_by_key(|b| b.unwrap_or(u64::MAX));
    layers.dedup();
    let (low, high) = match scale {
        Scale::Bits => (1.0, 32.0),
        Scale::Log => decades(bars.iter().map(|b| b.value)),
    };
    let height_of = |value: f64| match value {
        v if v <= 0.0 => 0.0,
        v => HEIGHT * (v.clamp(low, high).log2() - low.log2()) / (high.log2() - low.log2()),
    };
    let mut body = String::new();
    let mut x = LEFT;
    for layer in &layers {
        let start = x;
        for bar in bars.iter().filter(|b| b.block == *layer) {
            let h = height_of(bar.value);
            let _ = writeln!(
                body,
                r#"<rect x="{x:.1}" y="{:.1}" width="{BAR}" height="{h:.1}" fill="{}"><title>{} {} {}</title></rect>"#,
                TOP + HEIGHT - h,
                type_colour(bar.ty),
                escape(bar.name),
                escape(bar.ty),
                format_value(bar.value)
            );
            x += BAR;
        }
        let label = layer.map_or("other".to_owned(), |b| b.to_string());
        let _ = writeln!(
            body,
            r#"<text x="{:.1}" y="{:.1}" font-size="8" text-anchor="middle">{label}</text>"#,
            (start + x) / 2.0,
            TOP + HEIGHT + 12.0
        );
        x += GAP;
    }
    let step = match scale {
        Scale::Bits => 2.0,
        Scale::Log => 10.0,
    };
    let ticks: Vec<f64> =
        std::iter::successors(Some(low), |t| Some(t * step)).take_while(|t| *t <= high * 1.001).collect();
    for tick in ticks {
        let y = TOP + HEIGHT - height_of(tick);
        let _ = writeln!(
            body,
            r##"<line x1="{LEFT}" x2="{x:.1}" y1="{y:.1}" y2="{y:.1}" stroke="#ccc" stroke-width="0.5"/><text x="{:.1}" y="{:.1}" font-size="8" text-anchor="end">{}</text>"##,
            LEFT - 4.0,
            y + 3.0,
            format_value(tick)
        );
    }
    let legend_y = TOP + HEIGHT + 30.0;
    let mut types: Vec<&str> = bars.iter().map(|b| b.ty).collect();
    types.sort_by(|a, b| type_rank(a).cmp(&type_rank(b)).then(a.cmp(b)));
    types.dedup();
    let mut legend_x = LEFT;
    for ty in types {
        let _ = writeln!(
            body,
            r#"<rect x="{legend_x:.1}" y="{:.1}" width="8" height="8" fill="{}"/><text x="{:.1}" y="{legend_y:.1}" font-size="9">{}</text>"#,
            legend_y - 8.0,
            type_colour(ty),
            legend_x + 11.0,
            escape(ty)
        );
        legend_x += LEGEND_ITEM;
    }
    let title_width = LEFT + title.chars().count() as f64 * CHAR_WIDTH;
    let width = (x + LEFT).max(legend_x + LEFT).max(title_width + LEFT);
    format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="{width:.0}" height="{:.0}" font-family="sans-serif" role="img">
<text x="{LEFT}" y="14" font-size="11">{}</text>
<text x="12" y="{:.1}" font-size="9" transform="rotate(-90 12 {:.1})" text-anchor="middle">{}</text>
{body}</svg>
"#,
        legend_y + 10.0,
        escape(title),
        TOP + HEIGHT / 2.0,
        TOP + HEIGHT / 2.0,
        escape(axis)
    )
}

/// One model of a ladder on a size-against-quality chart.
pub(super) struct Point<'a> {
    pub label: &'a str,
    /// Bits per weight.
    pub x: f64,
    pub y: f64,
    /// The ± of `y` (drawn as a whisker), 0 for none.
    pub error: f64,
}

/// Something drawn across a size-against-quality chart: a value of `y`
/// (the base model's perplexity) or of `x` (a budget plan's size).
pub(super) enum Rule<'a> {
    AtY(f64, &'a str),
    AtX(f64, &'a str),
}

const PLOT_WIDTH: f64 = 480.0;

/// `points` with bits per weight across and `axis` up (`log`: by decades),
/// each point labelled, with `rules` drawn across.
pub(super) fn quality(title: &str, axis: &str, log: bool, points: &[Point], rules: &[Rule]) -> String {
    let (x_low, x_high) = x_range(points, rules);
    let (y_low, y_high) = y_range(points, rules, log);
    let x_of = |x: f64| LEFT + PLOT_WIDTH * (x - x_low) / (x_high - x_low);
    let y_of = |y: f64| {
        let fraction = match log {
            true if y > 0.0 => (y.log10() - y_low.log10()) / (y_high.log10() - y_low.log10()),
            true => 0.0,
            false => (y - y_low) / (y_high - y_low),
        };
        TOP + HEIGHT - HEIGHT * fraction.clamp(0.0, 1.0)
    };
    let mut body = String::new();
    let y_ticks: Vec<f64> = match log {
        true => std::iter::successors(Some(y_low), |t| Some(t * 10.0)).take_while(|t| *t <= y_high * 1.001).collect(),
        false => (0..=4).map(|k| y_low + (y_high - y_low) * f64::from(k) / 4.0).collect(),
    };
    for tick in y_ticks {
        let y = y_of(tick);
        let _ = writeln!(
            body,
            r##"<line x1="{LEFT}" x2="{:.1}" y1="{y:.1}" y2="{y:.1}" stroke="#ccc" stroke-width="0.5"/><text x="{:.1}" y="{:.1}" font-size="8" text-anchor="end">{}</text>"##,
            LEFT + PLOT_WIDTH,
            LEFT - 4.0,
            y + 3.0,
            format_value(tick)
        );
    }
    // At most a dozen ticks, whatever a document says.
    let x_step = ((x_high - x_low) / 12.0).ceil().max(1.0);
    let mut x_tick = x_low;
    while x_tick <= x_high + 1e-9 && x_tick.is_finite() && x_step.is_finite() {
        let x = x_of(x_tick);
        let _ = writeln!(
            body,
            r##"<line x1="{x:.1}" x2="{x:.1}" y1="{TOP}" y2="{:.1}" stroke="#eee" stroke-width="0.5"/><text x="{x:.1}" y="{:.1}" font-size="8" text-anchor="middle">{}</text>"##,
            TOP + HEIGHT,
            TOP + HEIGHT + 12.0,
            format_value(x_tick)
        );
        x_tick += x_step;
    }
    for rule in rules {
        let (x1, x2, y1, y2, label) = match *rule {
            Rule::AtY(y, label) => (LEFT, LEFT + PLOT_WIDTH, y_of(y), y_of(y), label),
            Rule::AtX(x, label) => (x_of(x), x_of(x), TOP, TOP + HEIGHT, label),
        };
        let _ = writeln!(
            body,
            r##"<line x1="{x1:.1}" x2="{x2:.1}" y1="{y1:.1}" y2="{y2:.1}" stroke="#888" stroke-dasharray="4 3"/><text x="{:.1}" y="{:.1}" font-size="8" fill="#555">{}</text>"##,
            x1 + 3.0,
            y1.min(y2) + 10.0,
            escape(label)
        );
    }
    for point in points {
        let (x, y) = (x_of(point.x), y_of(point.y));
        if point.error > 0.0 {
            let _ = writeln!(
                body,
                r##"<line x1="{x:.1}" x2="{x:.1}" y1="{:.1}" y2="{:.1}" stroke="#08519c"/>"##,
                y_of(point.y + point.error),
                y_of(point.y - point.error)
            );
        }
        let _ = writeln!(
            body,
            r##"<circle cx="{x:.1}" cy="{y:.1}" r="3.5" fill="#08519c"><title>{} {:.2} bpw {}</title></circle><text x="{:.1}" y="{:.1}" font-size="9">{}</text>"##,
            escape(point.label),
            point.x,
            point.y,
            x + 5.0,
            y - 5.0,
            escape(point.label)
        );
    }
    let label_width = points.iter().map(|p| p.label.chars().count()).max().unwrap_or(0) as f64 * CHAR_WIDTH;
    let title_width = LEFT + title.chars().count() as f64 * CHAR_WIDTH;
    let width = (LEFT + PLOT_WIDTH + label_width).max(title_width) + LEFT;
    format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="{width:.0}" height="{:.0}" font-family="sans-serif" role="img">
<text x="{LEFT}" y="14" font-size="11">{}</text>
<text x="12" y="{:.1}" font-size="9" transform="rotate(-90 12 {:.1})" text-anchor="middle">{}</text>
<text x="{:.1}" y="{:.1}" font-size="9" text-anchor="middle">bits per weight</text>
{body}</svg>
"#,
        TOP + HEIGHT + 36.0,
        escape(title),
        TOP + HEIGHT / 2.0,
        TOP + HEIGHT / 2.0,
        escape(axis),
        LEFT + PLOT_WIDTH / 2.0,
        TOP + HEIGHT + 28.0
    )
}

/// Bits per weight across: the points' and the vertical rules' extent,
/// widened to whole bits.
fn x_range(points: &[Point], rules: &[Rule]) -> (f64, f64) {
    let xs = points.iter().map(|p| p.x).chain(rules.iter().filter_map(|r| match r {
        Rule::AtX(x, _) => Some(*x),
        Rule::AtY(..) => None,
    }));
    let (x_low, x_high) = xs.fold((f64::MAX, f64::MIN), |(lo, hi), x| (lo.min(x), hi.max(x)));
    match x_low <= x_high {
        true => ((x_low - 0.5).floor().max(0.0), (x_high + 0.5).ceil()),
        false => (0.0, 16.0),
    }
}

/// The quantity up: the points' error bars' and the horizontal rules'
/// extent, by decades when `log`, else with a tenth of margin.
fn y_range(points: &[Point], rules: &[Rule], log: bool) -> (f64, f64) {
    let ys: Vec<f64> = points
        .iter()
        .flat_map(|p| [p.y - p.error, p.y + p.error])
        .chain(rules.iter().filter_map(|r| match r {
            Rule::AtY(y, _) => Some(*y),
            Rule::AtX(..) => None,
        }))
        .filter(|y| y.is_finite() && (!log || *y > 0.0))
        .collect();
    match log {
        true => decades(ys.iter().copied()),
        false => {
            let (lo, hi) = ys.iter().fold((f64::MAX, f64::MIN), |(lo, hi), y| (lo.min(*y), hi.max(*y)));
            if lo > hi {
                (0.0, 1.0)
            } else {
                (lo - (hi - lo).max(lo.abs() * 0.01) * 0.1, hi + (hi - lo).max(hi.abs() * 0.01) * 0.1)
            }
        }
    }
}

/// The powers of ten just below and above the positive values.
fn decades(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let positive: Vec<f64> = values.filter(|v| *v > 0.0 && v.is_finite()).collect();
    let (min, max) = positive.iter().fold((f64::MAX, f64::MIN), |(lo, hi), v| (lo.min(*v), hi.max(*v)));
    if positive.is_empty() {
        return (1.0, 10.0);
    }
    let low = 10f64.powf(min.log10().floor());
    let high = 10f64.powf(max.log10().ceil()).max(low * 10.0);
    (low, high)
}

fn format_value(value: f64) -> String {
    match value {
        0.0 => "0".to_owned(),
        v if (0.01..10_000.0).contains(&v.abs()) => format!("{}", (v * 100.0).round() / 100.0),
        v => format!("{v:.1e}"),
    }
}

/// Where a type sits when every ggml type is ordered by bits per weight.
fn type_rank(ty: &str) -> Option<usize> {
    let ty = GgmlType::from_name(ty)?;
    Some(types_by_bits().iter().position(|t| *t == ty).expect("every type is ranked"))
}

fn types_by_bits() -> &'static [GgmlType] {
    static SORTED: std::sync::OnceLock<Vec<GgmlType>> = std::sync::OnceLock::new();
    SORTED.get_or_init(|| {
        let mut types: Vec<GgmlType> = GgmlType::all().collect();
        types.sort_by(|a, b| a.bits_per_weight().total_cmp(&b.bits_per_weight()).then(a.id().cmp(&b.id())));
        types
    })
}

/// A colour per ggml type, from red (fewest bits per weight) through green
/// to violet (most), so every type has its own and types of a size look
/// alike; grey for a name that is no ggml type.
pub(super) fn type_colour(ty: &str) -> String {
    match type_rank(ty) {
        Some(rank) => {
            let hue = 280.0 * rank as f64 / (types_by_bits().len() - 1).max(1) as f64;
            // Neighbours differ in lightness too, so close hues stay apart.
            let lightness = if rank % 2 == 0 { 42 } else { 62 };
            format!("hsl({hue:.0},70%,{lightness}%)")
        }
        None => "#999999".to_owned(),
    }
}

/// `text` safe inside XML and HTML, in elements and in quoted attributes.
pub(super) fn escape(text: &str) -> Cow<'_, str> {
    if !text.contains(['&', '<', '>', '"', '\'']) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_escaped_and_the_title_fits() {
        let bars = [Bar { name: "blk.0.<attn>&\"q\"", ty: "Q4_K", block: Some(0), value: 4.5 }];
        let title = "a long title that is much wider than one bar of one tensor in one layer";
        let svg = by_layer(title, "bits per weight", Scale::Bits, &bars);
        assert!(svg.contains("blk.0.&lt;attn&gt;&amp;&quot;q&quot;"), "{svg}");
        assert!(!svg.contains("<attn>"));
        let width: f64 = svg.split("width=\"").nth(1).unwrap().split('"').next().unwrap().parse().unwrap();
        assert!(width >= LEFT + title.len() as f64 * CHAR_WIDTH, "{width}");
    }

    #[test]
    fn every_type_has_its_own_colour() {
        let mut colours: Vec<String> = GgmlType::all().map(|t| type_colour(t.name())).collect();
        let n = colours.len();
        colours.sort();
        colours.dedup();
        assert_eq!(colours.len(), n);
        assert_eq!(type_colour("NOT_A_TYPE"), "#999999");
        assert!(type_rank("Q2_K") < type_rank("Q8_0") && type_rank("Q8_0") < type_rank("F32"));
    }

    #[test]
    fn a_quality_chart_places_and_labels_every_point() {
        let points = [
            Point { label: "q[preset=Q8_0]", x: 8.5, y: 0.0005, error: 0.0001 },
            Point { label: "q[preset=<IQ3_S>]", x: 3.44, y: 0.05, error: 0.0 },
        ];
        let rules = [Rule::AtX(4.0, "budget 120MB")];
        let svg = quality("KLD against size", "mean KLD (log)", true, &points, &rules);
        assert_eq!(svg.matches("<circle").count(), 2);
        assert!(svg.contains("q[preset=&lt;IQ3_S&gt;]") && !svg.contains("<IQ3_S>"), "{svg}");
        assert!(svg.contains("budget 120MB"));
        // The smaller model lies left of the larger, its worse KLD above.
        let centre = |label: &str| -> (f64, f64) {
            let at = svg.find(&format!("<title>{label}")).unwrap();
            let circle = &svg[svg[..at].rfind("<circle").unwrap()..at];
            let number = |attr: &str| circle.split(attr).nth(1).unwrap().split('"').next().unwrap().parse().unwrap();
            (number("cx=\""), number("cy=\""))
        };
        let (q8, iq3) = (centre("q[preset=Q8_0]"), centre("q[preset=&lt;IQ3_S&gt;]"));
        assert!(iq3.0 < q8.0 && iq3.1 < q8.1, "{q8:?} {iq3:?}");
    }

    #[test]
    fn a_log_scale_spans_the_decades_of_the_values() {
        assert_eq!(decades([0.003, 0.2, 0.0].into_iter()), (0.001, 1.0));
        assert_eq!(decades([5.0].into_iter()), (1.0, 10.0));
        assert_eq!(decades(std::iter::empty()), (1.0, 10.0));
    }
}
