"""The published figures: one record per key across the topic modules, each with a source and a date."""
from gpulab import figures, reference


def test_every_key_is_unique_and_gathered():
    keys = [p.key for p in figures.ALL]
    assert len(keys) == len(set(keys)), sorted(k for k in keys if keys.count(k) > 1)
    assert set(reference.PUBLISHED) == set(keys)


def test_every_figure_has_provenance():
    for p in figures.ALL:
        assert p.source and p.url.startswith("http") and p.date[:2] in ("19", "20"), p.key
        assert p.low <= p.high, p.key
