"""The runner's start order does not line up with groups (a group started first reads differently)."""

from statistics import mean

from alloclab.run.runner import start_order


def _mean_positions(order):
    pos = {}
    for n, (g, _) in enumerate(order):
        pos.setdefault(g, []).append(n)
    return {g: mean(p) for g, p in pos.items()}


def test_every_group_starts_at_the_same_mean_position_for_every_seed():
    for groups, replicas in ((["a", "b"], 2), (["a", "b"], 4), (["glibc", "je", "mi"], 6)):
        for seed in range(200):
            order = start_order(groups, replicas, seed)
            assert sorted(order) == sorted((g, i) for g in groups for i in range(1, replicas + 1))
            assert len(set(_mean_positions(order).values())) == 1, (groups, replicas, seed, order)


def test_each_block_holds_one_replica_of_every_group_in_a_seeded_order():
    groups = ["a", "b", "c"]
    orders = {seed: start_order(groups, 3, seed) for seed in range(30)}
    for order in orders.values():
        for k in range(3):
            assert sorted(g for g, _ in order[3 * k : 3 * k + 3]) == groups
    assert start_order(groups, 3, 7) == orders[7]  # recorded seed -> the same order
    assert len({tuple(g for g, _ in o[:3]) for o in orders.values()}) == 6  # every first block occurs
