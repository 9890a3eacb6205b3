import numpy as np
import pytest

from conftest import make_toy_dataset
from privsynth.data import Normalizer, OfflineDataset
from privsynth.errors import InvalidData, PrivacyError, SpaceMismatch


def test_transition_matrix_order_and_round_trip(toy_dataset):
    m = toy_dataset.transition_matrix()
    assert m.shape == (15, 4 + 2 + 1 + 4 + 1)
    np.testing.assert_array_equal(m[:, :4], toy_dataset.observations)
    np.testing.assert_array_equal(m[:, 4:6], toy_dataset.actions)
    np.testing.assert_array_equal(m[:, 6], toy_dataset.rewards)
    np.testing.assert_array_equal(m[:, 7:11], toy_dataset.next_observations)
    np.testing.assert_array_equal(m[:, 11], toy_dataset.terminals.astype(np.float32))
    back = OfflineDataset.from_transition_matrix(m, 4, 2, episode_ids=toy_dataset.episode_ids)
    np.testing.assert_array_equal(back.transition_matrix(), m)


def test_episodes_view(toy_dataset):
    eps = list(toy_dataset.episodes())
    assert [len(e) for e in eps] == [5, 3, 7]
    assert [e.episode_id for e in eps] == [10, 11, 12]
    assert eps[1].terminals[-1]
    assert toy_dataset.n_episodes == 3


def test_fragments_linking_and_padding(toy_dataset):
    fr = toy_dataset.fragments(horizon=3)
    rows = toy_dataset.transition_matrix()
    # episode lengths 5, 3, 7 -> fragments at offsets [0,3], [0], [0,3,6]
    assert list(fr.episode_index) == [0, 0, 1, 2, 2, 2]
    assert list(fr.start) == [0, 3, 0, 0, 3, 6]
    # first fragment of each episode links to zeros
    for j in (0, 2, 3):
        assert not fr.link[j].any()
    # linking transition = the one just before the fragment
    np.testing.assert_array_equal(fr.link[1], rows[2])
    np.testing.assert_array_equal(fr.link[4], rows[8 + 2])
    np.testing.assert_array_equal(fr.link[5], rows[8 + 5])
    # padding: episode 0 second fragment has 2 real steps; episode 2 last has 1
    assert fr.mask[1].tolist() == [True, True, False]
    assert fr.mask[5].tolist() == [True, False, False]
    assert not fr.data[1, 2].any() and not fr.data[5, 1:].any()
    np.testing.assert_array_equal(fr.data[1, :2], rows[3:5])
    # every real transition appears exactly once with stride = horizon
    assert fr.mask.sum() == toy_dataset.n_transitions


def test_fragments_overlapping_stride():
    ds = make_toy_dataset(lengths=(7,))
    fr = ds.fragments(horizon=4, stride=2)
    assert list(fr.start) == [0, 2, 4]
    assert fr.mask[-1].tolist() == [True, True, True, False]
    assert fr.mask[:2].all()


def test_split_by_episode_is_seeded_and_disjoint():
    ds = make_toy_dataset(lengths=tuple(range(2, 22)))
    a1, b1 = ds.split_episodes(0.8, seed=3)
    a2, b2 = ds.split_episodes(0.8, seed=3)
    np.testing.assert_array_equal(a1.episode_ids, a2.episode_ids)
    assert set(a1.episode_ids).isdisjoint(set(b1.episode_ids))
    assert a1.n_episodes == 16 and b1.n_episodes == 4
    assert a1.n_transitions + b1.n_transitions == ds.n_transitions
    a3, _ = ds.split_episodes(0.8, seed=4)
    assert set(a3.episode_ids) != set(a1.episode_ids)


def test_bad_inputs_give_clear_errors(toy_dataset):
    obs = toy_dataset.observations.copy()
    obs[4, 1] = np.nan
    with pytest.raises(InvalidData, match="NaN or inf"):
        OfflineDataset(obs, toy_dataset.actions, toy_dataset.rewards, toy_dataset.next_observations,
                       toy_dataset.terminals, toy_dataset.timeouts, toy_dataset.episode_ids)
    with pytest.raises(InvalidData, match="empty"):
        OfflineDataset(np.zeros((0, 4)), np.zeros((0, 2)), [], np.zeros((0, 4)), [], [], [])
    ids = toy_dataset.episode_ids.copy()
    ids[-1] = 10
    with pytest.raises(InvalidData, match="contiguous"):
        OfflineDataset(toy_dataset.observations, toy_dataset.actions, toy_dataset.rewards,
                       toy_dataset.next_observations, toy_dataset.terminals, toy_dataset.timeouts, ids)
    other = make_toy_dataset(obs_dim=3)
    with pytest.raises(SpaceMismatch, match="mismatched spaces"):
        toy_dataset.check_compatible(other)


def test_concatenate_keeps_episodes_distinct():
    a, b = make_toy_dataset(name="a"), make_toy_dataset(seed=1, name="b")
    c = OfflineDataset.concatenate([a, b])
    assert c.n_episodes == 6 and c.n_transitions == 30


def test_normalizer_refuses_sensitive_and_keeps_terminal():
    pub = make_toy_dataset()
    norm = Normalizer.fit_public(pub)
    x = pub.transition_matrix()
    z = norm.normalize(x)
    np.testing.assert_allclose(z[:, :-1].mean(0), 0, atol=1e-5)
    np.testing.assert_array_equal(z[:, -1], x[:, -1])
    np.testing.assert_allclose(norm.unnormalize(z), x, atol=1e-5)
    with pytest.raises(PrivacyError, match="sensitive"):
        Normalizer.fit_public(make_toy_dataset(sensitive=True))


def test_normalizer_state_dict_round_trip():
    norm = Normalizer.fit_public(make_toy_dataset())
    other = Normalizer(norm.dim)
    other.load_state_dict(norm.state_dict())
    assert other.source == norm.source
    np.testing.assert_array_equal(other.mean.numpy(), norm.mean.numpy())
