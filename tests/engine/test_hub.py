"""`LLM("owner/name")`: a hub id goes through `huggingface_hub.snapshot_download`. Tested on
the CPU without a network: (1) huggingface_hub itself, offline, over a cache folder in the
hub's layout (refs/main -> snapshots/<commit>/ files linked to blobs/), (2) a fake
`snapshot_download` that copies from a "remote" repository only the files its
`allow_patterns` match — a transformers 5 checkpoint keeps its chat template in
chat_template.jinja, which must be among them — and (3) an id that is not cached offline."""
import fnmatch
import hashlib
import shutil

import pytest

import tilesafe as ts
from tilesafe.engine import LLM, CheckpointError, SamplingParams

PROMPT = {"prompt_token_ids": [3, 17, 5, 60, 2]}
GREEDY = SamplingParams(temperature=0, max_tokens=4, logprobs=1)
CHAT = [{"role": "user", "content": "Hi"}]


@pytest.fixture
def offline_hub(tmp_path, monkeypatch):
    """hub(repo_id, folder): `folder`'s files cached as repo_id's main revision; the hub offline."""
    import huggingface_hub.constants as constants
    cache = tmp_path / "hub"
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))

    def put(repo_id: str, folder) -> str:
        repo = cache / ("models--" + repo_id.replace("/", "--"))
        commit = hashlib.sha1(repo_id.encode()).hexdigest()
        snapshot = repo / "snapshots" / commit
        (repo / "blobs").mkdir(parents=True)
        snapshot.mkdir(parents=True)
        (repo / "refs").mkdir()
        (repo / "refs" / "main").write_text(commit)
        for f in sorted(folder.iterdir()):
            blob = repo / "blobs" / hashlib.sha256(f.read_bytes()).hexdigest()
            shutil.copyfile(f, blob)
            (snapshot / f.name).symlink_to(f"../../blobs/{blob.name}")
        return str(snapshot)
    return put


def test_a_cached_hub_id_loads_offline(checkpoint, offline_hub, hf_greedy):
    folder, hf = checkpoint()
    snapshot = offline_hub("Qwen/Qwen3-Tiny-Test", folder)
    llm = LLM("Qwen/Qwen3-Tiny-Test", device="cpu", max_model_len=16, progress=False)
    assert str(llm.model_dir) == snapshot
    out = llm.generate(PROMPT, GREEDY)[0].outputs[0]
    assert out.token_ids == hf_greedy(hf, PROMPT["prompt_token_ids"], GREEDY.max_tokens)[0]


def test_an_id_not_cached_offline_is_a_checkpoint_error(offline_hub):
    with pytest.raises(CheckpointError) as e:
        LLM("Qwen/Not-Cached", device="cpu", progress=False)  # hub: missing
    err = e.value
    assert isinstance(err, ts.TileSafeError)
    assert "cannot fetch 'Qwen/Not-Cached' from the Hugging Face hub" in err.message
    assert err.help == "download it first and pass the local folder"
    with open(__file__) as f:
        line = next(i for i, text in enumerate(f, 1) if text.rstrip().endswith("# hub: missing"))
    assert err.loc is not None and err.loc.file == __file__ and err.loc.line == line


def test_the_download_asks_for_every_file_the_engine_reads(checkpoint, tmp_path, monkeypatch):
    """A repository as transformers 5 saves it (template in chat_template.jinja) plus files the
    engine does not read: the fake hub copies what allow_patterns match; the engine's chat
    template and tokenizer come through, the PyTorch weights do not."""
    import huggingface_hub
    import transformers

    from tilesafe.engine.qwen3_files import tokenizer_dir
    folder, _ = checkpoint()
    remote = tmp_path / "remote"
    shutil.copytree(folder, remote)
    transformers.AutoTokenizer.from_pretrained(str(tokenizer_dir())).save_pretrained(remote)
    assert (remote / "chat_template.jinja").is_file()
    (remote / "pytorch_model.bin").write_bytes(b"not read")
    asked = []

    def fake_snapshot_download(repo_id, allow_patterns=None, **kwargs):
        asked.append(repo_id)
        dest = tmp_path / "downloaded"
        dest.mkdir()
        for f in remote.iterdir():
            if allow_patterns is None or any(fnmatch.fnmatch(f.name, p) for p in allow_patterns):
                shutil.copyfile(f, dest / f.name)
        return str(dest)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot_download)
    llm = LLM("someone/qwen3-tiny", device="cpu", max_model_len=16, progress=False)
    assert asked == ["someone/qwen3-tiny"]
    got = {f.name for f in llm.model_dir.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
            "chat_template.jinja", "generation_config.json"} <= got and "pytorch_model.bin" not in got
    reference = transformers.AutoTokenizer.from_pretrained(str(remote))
    want = reference.apply_chat_template(CHAT, add_generation_prompt=True, tokenize=True)
    want = want["input_ids"] if hasattr(want, "keys") else want       # a BatchEncoding in transformers 5
    assert llm.get_tokenizer().apply_chat_template(CHAT) == list(want)
