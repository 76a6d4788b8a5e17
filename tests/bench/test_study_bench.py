"""`bench study`: the Table 3 study file run over a generated Magnetic Tile tree of the real size."""
from pipeline.data.paper_splits import MT_POOLS, magnetic_tile_splits
from pipeline.bench.study import fake_magnetic_tile_tree, study_benchmark


def test_the_fake_tree_has_the_real_pools_and_gives_the_papers_splits(tmp_path):
    root = fake_magnetic_tile_tree(tmp_path, size=8)
    assert {name: len(list((root / f"MT_{name}" / "Imgs").glob("*.jpg"))) for name in MT_POOLS} == MT_POOLS
    assert magnetic_tile_splits(root, seed=0)["mt-defect"].counts()["Fray"] == (13, 16)


def test_the_study_benchmark_runs_the_study_one_trial_at_a_time(tmp_path):
    """One trial of one epoch at 16 px (the GPU command runs 20 trials at 224 px, also with Dask workers)."""
    (timing,) = study_benchmark("cpu", workers=(), trials=1, image_size=16, epochs=1, raw_size=16)
    assert (timing.workers, timing.completed, timing.failed) == (0, 1, 0) and timing.seconds > 0
