//! Which GPUs to offer the kubelet when it asks for a preference (GetPreferredAllocation):
//! GPUs of one NUMA zone where possible, so that a pod's GPUs share a PCIe root and its CPUs.

use std::collections::{BTreeMap, BTreeSet};

/// A GPU the kubelet may pick: its device ID, index on the node and NUMA zone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate<'a> {
    pub id: &'a str,
    pub index: u32,
    pub zone: Option<u32>,
}

/// `size` device IDs: every one of `must_include` first, then the rest from as few zones as
/// possible. Zones are taken in this order: those already holding a must-include device; then
/// those that can hold all the rest alone, the smallest first (keeping big zones whole for
/// big requests); then the others, the fullest first. Within a zone, lowest index first.
/// Fewer than `size` come back only when fewer are available.
pub fn preferred<'a>(
    available: &[Candidate<'a>],
    must_include: &[&str],
    size: usize,
) -> Vec<&'a str> {
    let mut chosen: Vec<&'a str> = Vec::with_capacity(size);
    for id in must_include {
        if let Some(candidate) = available.iter().find(|c| c.id == *id)
            && !chosen.contains(&candidate.id)
        {
            chosen.push(candidate.id);
        }
    }
    let wanted = size.saturating_sub(chosen.len());
    let mut zones: BTreeMap<Option<u32>, Vec<&Candidate<'a>>> = BTreeMap::new();
    for candidate in available.iter().filter(|c| !chosen.contains(&c.id)) {
        zones.entry(candidate.zone).or_default().push(candidate);
    }
    for members in zones.values_mut() {
        members.sort_by_key(|c| c.index);
    }
    let anchored: BTreeSet<Option<u32>> = available
        .iter()
        .filter(|c| chosen.contains(&c.id))
        .map(|c| c.zone)
        .collect();
    let mut order: Vec<(Option<u32>, usize)> = zones
        .iter()
        .map(|(zone, members)| (*zone, members.len()))
        .collect();
    order.sort_by_key(|&(zone, free)| {
        let rank = if anchored.contains(&zone) {
            0
        } else if free >= wanted {
            1
        } else {
            2
        };
        // Best fit among zones that fit; fullest first among those that do not.
        let size_key = if rank == 2 { usize::MAX - free } else { free };
        (rank, size_key, zone)
    });
    for (zone, _) in order {
        for candidate in zones.get(&zone).into_iter().flatten() {
            if chosen.len() >= size {
                return chosen;
            }
            chosen.push(candidate.id);
        }
    }
    chosen
}

#[cfg(test)]
mod tests {
    use super::*;

    const IDS: [&str; 8] = ["g0", "g1", "g2", "g3", "g4", "g5", "g6", "g7"];

    /// GPUs `indices` of an 8-GPU node whose zone 0 holds GPUs 0-3 and zone 1 GPUs 4-7.
    fn two_zones(indices: &[u32]) -> Vec<Candidate<'static>> {
        indices
            .iter()
            .map(|&i| Candidate {
                id: IDS[i as usize],
                index: i,
                zone: Some(i / 4),
            })
            .collect()
    }

    #[test]
    fn keeps_a_request_inside_one_zone() {
        // Zone 0 has 1 free GPU, zone 1 has 3: two GPUs come from zone 1.
        let available = two_zones(&[3, 4, 6, 7]);
        assert_eq!(preferred(&available, &[], 2), ["g4", "g6"]);
    }

    #[test]
    fn best_fit_leaves_the_bigger_zone_whole() {
        let available = two_zones(&[2, 3, 4, 5, 6, 7]);
        assert_eq!(preferred(&available, &[], 2), ["g2", "g3"]);
        assert_eq!(preferred(&available, &[], 4), ["g4", "g5", "g6", "g7"]);
    }

    #[test]
    fn must_include_comes_first_and_pulls_its_zone() {
        let available = two_zones(&[0, 1, 4, 5, 6]);
        assert_eq!(preferred(&available, &["g5"], 2), ["g5", "g4"]);
    }

    #[test]
    fn spills_over_fullest_zone_first_when_none_fits() {
        let available = two_zones(&[0, 4, 5, 6]);
        assert_eq!(preferred(&available, &[], 4), ["g4", "g5", "g6", "g0"]);
    }

    #[test]
    fn without_zones_lowest_indices_first_and_never_more_than_available() {
        let available: Vec<_> = [5, 1, 3]
            .iter()
            .map(|&i| Candidate {
                id: IDS[i as usize],
                index: i,
                zone: None,
            })
            .collect();
        assert_eq!(preferred(&available, &[], 2), ["g1", "g3"]);
        assert_eq!(preferred(&available, &["nope"], 5), ["g1", "g3", "g5"]);
    }
}
