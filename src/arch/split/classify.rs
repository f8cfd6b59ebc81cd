//! Stage 1, classification: what part of a layer a tensor is, from its
//! name, by the patterns llama.cpp's split planner matches (whole-name
//! regular expressions, so the same names fall in the same classes; a `.`
//! the reference leaves unescaped stays a wildcard here too).

use std::sync::LazyLock;

use regex::Regex;

/// The tensor classes the split planner tells apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    AttnQ,
    /// `attn_k` or `attn_v` (`value` says which).
    AttnKv {
        value: bool,
    },
    AttnQBias,
    AttnKvBias {
        value: bool,
    },
    AttnQkv,
    AttnQkvBias,
    QkNorm,
    AttnSinks,
    AttnOut,
    AttnOutBias,
    AttnGate,
    SsmDt,
    SsmA,
    /// `ssm_alpha` or `ssm_beta`.
    SsmAlphaBeta,
    SsmBetaAlpha,
    SsmConv1d,
    SsmOut,
    /// `ffn_up` or `ffn_gate`, dense or experts (`up` says which).
    FfnUpOrGate {
        up: bool,
    },
    FfnUpOrGateBias {
        up: bool,
    },
    FfnGateUp,
    FfnDown,
    FfnDownBias,
    FfnDownExpsBias,
    Output,
    OutputBias,
    /// Anything else: mirrored on every device.
    Other,
}

/// A tensor's class and its layer (`blk.N.`; 0 for a tensor outside the blocks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Classified {
    pub part: Part,
    pub layer: Option<usize>,
}

static PATTERNS: LazyLock<Vec<(Regex, Part)>> = LazyLock::new(|| {
    let table: &[(&str, Part)] = &[
        (r"blk\.[0-9]*\.attn_q.weight", Part::AttnQ),
        (r"blk\.[0-9]*\.attn_k.weight", Part::AttnKv { value: false }),
        (r"blk\.[0-9]*\.attn_v.weight", Part::AttnKv { value: true }),
        (r"blk\.[0-9]*\.attn_qkv.weight", Part::AttnQkv),
        (r"blk\.[0-9]*\.attn_q\.bias", Part::AttnQBias),
        (r"blk\.[0-9]*\.attn_k\.bias", Part::AttnKvBias { value: false }),
        (r"blk\.[0-9]*\.attn_v\.bias", Part::AttnKvBias { value: true }),
        (r"blk\.[0-9]*\.attn_qkv.bias", Part::AttnQkvBias),
        (r"blk\.[0-9]*\.attn_(q|k)_norm\.weight", Part::QkNorm),
        (r"blk\.[0-9]*\.attn_sinks.weight", Part::AttnSinks),
        (r"blk\.[0-9]*\.attn_output.weight", Part::AttnOut),
        (r"blk\.[0-9]*\.attn_output.bias", Part::AttnOutBias),
        (r"blk\.[0-9]*\.attn_gate.weight", Part::AttnGate),
        (r"blk\.[0-9]*\.ssm_dt.bias", Part::SsmDt),
        (r"blk\.[0-9]*\.ssm_a", Part::SsmA),
        (r"blk\.[0-9]*\.ssm_(alpha|beta).weight", Part::SsmAlphaBeta),
        (r"blk\.[0-9]*\.ssm_ba.weight", Part::SsmBetaAlpha),
        (r"blk\.[0-9]*\.ssm_conv1d.weight", Part::SsmConv1d),
        (r"blk\.[0-9]*\.ssm_out.weight", Part::SsmOut),
        (r"blk\.[0-9]*\.ffn_up(_exps)?.weight", Part::FfnUpOrGate { up: true }),
        (r"blk\.[0-9]*\.ffn_gate(_exps)?.weight", Part::FfnUpOrGate { up: false }),
        (r"blk\.[0-9]*\.ffn_up(_exps)?.bias", Part::FfnUpOrGateBias { up: true }),
        (r"blk\.[0-9]*\.ffn_gate(_exps)?.bias", Part::FfnUpOrGateBias { up: false }),
        (r"blk\.[0-9]*\.ffn_gate_up(_exps)?.weight", Part::FfnGateUp),
        (r"blk\.[0-9]*\.ffn_down(_exps)?.weight", Part::FfnDown),
        (r"blk\.[0-9]*\.ffn_down.bias", Part::FfnDownBias),
        (r"blk\.[0-9]*\.ffn_down_exps.bias", Part::FfnDownExpsBias),
        (r"output\.weight", Part::Output),
        (r"output\.bias", Part::OutputBias),
    ];
    table
        .iter()
        .map(|&(pattern, part)| (Regex::new(&format!("^(?:{pattern})$")).expect("a valid pattern"), part))
        .collect()
});

/// Classifies tensor `name`. A `blk.` name without a layer number is the
/// reference's parse failure, refused by the caller.
pub fn classify(name: &str) -> Classified {
    let part = PATTERNS.iter().find(|(re, _)| re.is_match(name)).map_or(Part::Other, |&(_, part)| part);
    let layer = name.strip_prefix("blk.").and_then(|rest| rest.split('.').next()).and_then(|n| n.parse().ok());
    Classified { part, layer }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_fall_in_the_reference_classes() {
        let part = |name: &str| classify(name).part;
        assert_eq!(part("blk.3.attn_q.weight"), Part::AttnQ);
        assert_eq!(part("blk.3.attn_v.bias"), Part::AttnKvBias { value: true });
        assert_eq!(part("blk.0.ffn_up_exps.weight"), Part::FfnUpOrGate { up: true });
        assert_eq!(part("blk.0.ffn_down_exps.bias"), Part::FfnDownExpsBias);
        // Shared experts and routers are not split.
        assert_eq!(part("blk.0.ffn_up_shexp.weight"), Part::Other);
        assert_eq!(part("blk.0.ffn_gate_inp.weight"), Part::Other);
        assert_eq!(part("token_embd.weight"), Part::Other);
        assert_eq!(classify("blk.17.attn_k_norm.weight"), Classified { part: Part::QkNorm, layer: Some(17) });
        assert_eq!(classify("output.weight"), Classified { part: Part::Output, layer: None });
    }
}
