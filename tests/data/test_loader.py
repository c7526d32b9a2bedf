import numpy as np
import pytest
import torch

from exoformer.data.loader import TrainBatches, validation_batches
from exoformer.data.shards import write_shard
from exoformer.errors import UserError

EOT = 7
T = 8


def make_data(directory, shard_tokens):
    for i, tokens in enumerate(shard_tokens):
        write_shard(directory / f"d_train_{i:06d}.bin", np.asarray(tokens))
    write_shard(directory / "d_val_000000.bin", np.arange(3 * T + 1) % 5)
    return directory


def all_rows(loader: TrainBatches, steps: int):
    return [torch.cat([b.x for b in loader.next_step()]) for _ in range(steps)]


def test_chunks_and_doc_starts_at_shard_and_sequence_boundaries(tmp_path):
    # shard 0: 2 full chunks (17 tokens -> (17-1)//8 = 2); EOT at 0 (seq start), 5 and 8 (start of chunk 1).
    shard0 = [EOT, 1, 2, 3, 4, EOT, 1, 2, EOT, 3, 4, 5, 6, 1, 2, 3, 4]
    shard1 = [1, 2, EOT, 3, 4, 5, 6, 1, 2]  # 1 chunk; no EOT at its first token (a document continues)
    make_data(tmp_path, [shard0, shard1])
    loader = TrainBatches(tmp_path, seq_len=T, step_seqs=3, micro_batch_seqs=3, seed=0, eot=EOT)
    assert loader.shards.num_chunks == 3
    rows = {int(i): loader.shards.batch([i]) for i in range(3)}
    b0, b1, b2 = rows[0], rows[1], rows[2]
    assert b0.x[0].tolist() == shard0[0:8] and b0.y[0].tolist() == shard0[1:9]
    assert b1.x[0].tolist() == shard0[8:16] and b1.y[0].tolist() == shard0[9:17]
    assert b2.x[0].tolist() == shard1[0:8] and b2.y[0].tolist() == shard1[1:9]  # never crosses shards
    assert b0.doc_starts[0].nonzero().flatten().tolist() == [0, 5]
    assert b1.doc_starts[0].nonzero().flatten().tolist() == [0]  # EOT at t=0 and t=0 coincide
    assert b2.doc_starts[0].nonzero().flatten().tolist() == [0, 2]  # t=0 always a start
    assert b0.x.dtype == torch.int64 and b0.doc_starts.dtype == torch.bool


def random_shards(tmp_path, seed=0):
    rng = np.random.default_rng(seed)
    return make_data(tmp_path, [rng.integers(0, 50, 10 * T + 1), rng.integers(0, 50, 7 * T + 5)])


def test_order_is_a_seeded_permutation_reshuffled_per_epoch(tmp_path):
    random_shards(tmp_path)
    loader = TrainBatches(tmp_path, seq_len=T, step_seqs=4, micro_batch_seqs=2, seed=3)
    epoch0 = torch.cat(all_rows(loader, 4))  # 16 of 17 chunks; the tail is dropped
    assert loader.state_dict()["epoch"] == 0
    epoch1 = torch.cat(all_rows(loader, 4))
    assert loader.state_dict()["epoch"] == 1
    assert len({tuple(r.tolist()) for r in epoch0}) == 16
    assert not torch.equal(epoch0, epoch1)
    again = TrainBatches(tmp_path, seq_len=T, step_seqs=4, micro_batch_seqs=2, seed=3)
    assert torch.equal(torch.cat(all_rows(again, 4)), epoch0)
    other = TrainBatches(tmp_path, seq_len=T, step_seqs=4, micro_batch_seqs=2, seed=4)
    assert not torch.equal(torch.cat(all_rows(other, 4)), epoch0)


def test_same_global_batch_for_one_and_two_ranks(tmp_path):
    random_shards(tmp_path)
    single = TrainBatches(tmp_path, seq_len=T, step_seqs=4, micro_batch_seqs=1, seed=1)
    ranks = [TrainBatches(tmp_path, seq_len=T, step_seqs=4, micro_batch_seqs=2, seed=1, rank=r, world_size=2)
             for r in range(2)]
    for _ in range(6):  # crosses an epoch boundary
        whole = torch.cat([b.x for b in single.next_step()])
        parts = torch.cat([torch.cat([b.x for b in rank.next_step()]) for rank in ranks])
        assert torch.equal(whole, parts)


def test_state_round_trip_resumes_the_same_batches(tmp_path):
    random_shards(tmp_path)
    loader = TrainBatches(tmp_path, seq_len=T, step_seqs=4, micro_batch_seqs=2, seed=5)
    all_rows(loader, 3)
    state = loader.state_dict()
    expected = all_rows(loader, 5)
    resumed = TrainBatches(tmp_path, seq_len=T, step_seqs=4, micro_batch_seqs=2, seed=5)
    resumed.load_state_dict(state)
    assert all(torch.equal(a, b) for a, b in zip(all_rows(resumed, 5), expected))
    with pytest.raises(UserError, match="seed"):
        TrainBatches(tmp_path, seq_len=T, step_seqs=4, micro_batch_seqs=2, seed=6).load_state_dict(state)


def test_validation_is_fixed_and_in_order(tmp_path):
    random_shards(tmp_path)
    first = [b.x for b in validation_batches(tmp_path, seq_len=T, batch_seqs=2)]
    assert [len(x) for x in first] == [2, 1]
    assert first[0][0].tolist() == (np.arange(T) % 5).tolist()
    again = [b.x for b in validation_batches(tmp_path, seq_len=T, batch_seqs=2)]
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    split = [b.x for r in range(2) for b in validation_batches(tmp_path, seq_len=T, batch_seqs=2, rank=r,
                                                                world_size=2)]
    assert torch.equal(torch.cat(split), torch.cat(first))


def test_token_beyond_vocab_is_a_one_line_error(tmp_path):
    random_shards(tmp_path)
    loader = TrainBatches(tmp_path, seq_len=T, step_seqs=4, micro_batch_seqs=2, seed=0, vocab_size=10)
    with pytest.raises(UserError, match=r"token id \d+ >= model vocab_size 10") as info:
        loader.shards.check_vocab()
    assert "\n" not in str(info.value) and "d_train_000000.bin" in str(info.value)


def test_missing_directory_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="not found"):
        TrainBatches(tmp_path / "nope", seq_len=T, step_seqs=4, micro_batch_seqs=2, seed=0)
