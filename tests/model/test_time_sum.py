"""``plus``: the sum of two time functions, as one time function."""

from __future__ import annotations

import pytest

from tidgap.model.timefn import affine, plus, table


def test_two_affines_sum_to_an_affine() -> None:
    total = plus(affine(1.0, 0.5), affine(2.0, 0.25))
    assert total.affine is not None
    assert [total(b) for b in (1, 7, 100)] == [3.75, 8.25, 78.0]


@pytest.mark.parametrize(
    ("first", "second", "domain"),
    [
        (table([1, 4, 16], [1.0, 3.0, 20.0]), table([2, 8, 32], [2.0, 5.0, 9.0]), (2, 16)),
        (table([1, 3, 9], [0.5, 4.0, 4.5]), affine(0.2, 1.5), (1, 9)),
        (affine(0.2, 1.5), table([2, 5], [1.0, 2.0]), (2, 5)),
    ],
)
def test_a_sum_with_a_table_equals_calling_both_where_both_are_defined(
    first, second, domain: tuple[int, int]
) -> None:
    total = plus(first, second)
    assert total.table is not None and total.domain == tuple(float(d) for d in domain)
    for size in range(domain[0], domain[1] + 1):
        assert total(size) == pytest.approx(first(size) + second(size), rel=1e-12)


def test_tables_with_no_size_in_common_are_refused() -> None:
    with pytest.raises(ValueError, match="share no size"):
        plus(table([1, 2], [1.0, 2.0]), table([4, 8], [1.0, 2.0]))
