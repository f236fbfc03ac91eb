"""``MEDIA:`` image tags inlined as ``data:`` images, with upstream's size limit and delivery
deny list (upstream-api.md §1.4; upstream's test_api_server_media_data_urls covers the same
cases)."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from hermes_queue.agents.media import MAX_INLINE_BYTES, inline_media

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADElEQVR4nGNgYGAAAAAEAAH2FzhVAAAAAElFTkSuQmCC"
)


def data_image(content: bytes, mime: str = "image/png") -> str:
    return f"![image](data:{mime};base64,{base64.b64encode(content).decode()})"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private home directory, so ``~`` and its credential folders are the test's own."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    return home


@pytest.fixture
def work(tmp_path: Path) -> Path:
    folder = tmp_path / "work"
    folder.mkdir()
    return folder


def test_an_image_tag_becomes_an_inline_image(work: Path, home: Path) -> None:
    (work / "chart.png").write_bytes(PNG)
    (work / "photo.JPG").write_bytes(b"jpeg bytes")
    text = f"Here: MEDIA:{work}/chart.png\nand MEDIA:{work}/photo.JPG done"
    assert inline_media(text) == (
        f"Here: {data_image(PNG)}\nand {data_image(b'jpeg bytes', 'image/jpeg')} done"
    )


def test_two_unquoted_tags_on_one_line_stay_tags_as_upstream(work: Path, home: Path) -> None:
    """Upstream's matcher runs from the first tag to the last image extension of the line, a
    path that does not exist; both tags stay as written there, and so here."""
    (work / "a.png").write_bytes(PNG)
    text = f"MEDIA:{work}/a.png and MEDIA:{work}/a.png"
    assert inline_media(text) == text


def test_quoted_paths_with_spaces_and_home_paths(work: Path, home: Path) -> None:
    (work / "my chart.png").write_bytes(PNG)
    (home / "pics").mkdir()
    (home / "pics" / "a.gif").write_bytes(b"gif")
    text = f'see `MEDIA:"{work}/my chart.png"` and MEDIA:~/pics/a.gif'
    assert inline_media(text) == f"see {data_image(PNG)} and {data_image(b'gif', 'image/gif')}"


def test_text_without_a_deliverable_tag_is_unchanged(work: Path, home: Path) -> None:
    (work / "notes.txt").write_text("not an image")
    (work / "report.pdf").write_bytes(b"%PDF")
    for text in (
        "",
        "no tags at all",
        f"MEDIA:{work}/missing.png",  # no such file
        "MEDIA:relative/chart.png",  # not absolute
        f"MEDIA:{work}/report.pdf",  # not an image
        f"MEDIA:{work}/notes.txt",
        f"MEDIA:{work}",  # a directory
    ):
        assert inline_media(text) == text


def test_files_over_five_megabytes_stay_tags(work: Path, home: Path) -> None:
    big, edge = work / "big.png", work / "edge.png"
    big.write_bytes(b"x" * (MAX_INLINE_BYTES + 1))
    edge.write_bytes(b"x" * MAX_INLINE_BYTES)
    assert inline_media(f"MEDIA:{big}") == f"MEDIA:{big}"
    assert inline_media(f"MEDIA:{edge}").startswith("![image](data:image/png;base64,")


def test_the_deny_list_refuses_system_and_credential_locations(
    work: Path, home: Path, tmp_path: Path
) -> None:
    hermes = tmp_path / "hermes"
    (hermes / "pairing").mkdir(parents=True)
    (hermes / "pairing" / "code.png").write_bytes(PNG)
    (home / ".ssh").mkdir()
    (home / ".ssh" / "key.png").write_bytes(PNG)
    (home / ".config").mkdir()
    (home / ".config" / "token.png").write_bytes(PNG)
    for refused in (
        hermes / "pairing" / "code.png",
        home / ".ssh" / "key.png",
        home / ".config" / "token.png",
    ):
        assert inline_media(f"MEDIA:{refused}", hermes_home=str(hermes)) == f"MEDIA:{refused}"
    (home / "ok.png").write_bytes(PNG)  # the user's own home is not refused as a whole
    assert inline_media(f"MEDIA:{home}/ok.png") == data_image(PNG)


def test_symlinks_and_traversal_are_judged_by_the_real_file(work: Path, home: Path) -> None:
    secret = Path("/etc/hostname") if Path("/etc/hostname").is_file() else Path("/etc/passwd")
    link = work / "innocent.png"
    link.symlink_to(secret)
    (home / ".aws").mkdir()
    (home / ".aws" / "creds.png").write_bytes(PNG)
    sneaky = work / "sneaky.png"
    sneaky.symlink_to(home / ".aws" / "creds.png")
    traversal = f"{work}/../../../../..{home}/.aws/creds.png"
    for text in (f"MEDIA:{link}", f"MEDIA:{sneaky}", f"MEDIA:{traversal}"):
        assert inline_media(text) == text
    (work / "real.png").write_bytes(PNG)
    (work / "alias.png").symlink_to(work / "real.png")
    assert inline_media(f"MEDIA:{work}/alias.png") == data_image(PNG)


def test_hermes_media_caches_deliver_even_under_a_refused_prefix(home: Path) -> None:
    """A Hermes home that lives under a refused location (here: its ``.config`` folder) still
    delivers what Hermes' tools cached, and never its secrets."""
    hermes = home / ".config" / "hermes"
    (hermes / "cache" / "images").mkdir(parents=True)
    cached = hermes / "cache" / "images" / "gen.webp"
    cached.write_bytes(b"webp")
    (hermes / "other.png").write_bytes(PNG)
    assert inline_media(f"MEDIA:{cached}", hermes_home=str(hermes)) == data_image(
        b"webp", "image/webp"
    )
    assert inline_media(f"MEDIA:{hermes}/other.png", hermes_home=str(hermes)) == (
        f"MEDIA:{hermes}/other.png"
    )


def test_the_same_decisions_as_upstreams_api_server(
    work: Path, home: Path, hermes_home: str
) -> None:
    """Differential: upstream's own inliner (hermes-agent 0.19.0) gives the same text."""
    from hermes_queue.agents.hermes import process

    process.prepare(hermes_home)
    from gateway.platforms.api_server import _resolve_media_to_data_urls as upstream

    (work / "a b.png").write_bytes(PNG)
    (work / "c.jpeg").write_bytes(b"jpeg")
    (work / "big.png").write_bytes(b"x" * (MAX_INLINE_BYTES + 1))
    (work / "doc.pdf").write_bytes(b"%PDF")
    (home / ".ssh").mkdir()
    (home / ".ssh" / "id.png").write_bytes(PNG)
    (work / "leak.png").symlink_to(home / ".ssh" / "id.png")
    texts = [
        f"one MEDIA:{work}/c.jpeg two",
        f"MEDIA:{work}/c.jpeg and MEDIA:{work}/a b.png",
        f"quoted `MEDIA:{work}/a b.png` and 'MEDIA:{work}/c.jpeg', end.",
        f"MEDIA:{work}/big.png MEDIA:{work}/doc.pdf MEDIA:{work}/nope.png",
        f"MEDIA:{home}/.ssh/id.png and MEDIA:{work}/leak.png and MEDIA:rel/c.png",
        f"(MEDIA:{work}/c.jpeg)\nMEDIA:{work}/../work/c.jpeg",
    ]
    for text in texts:
        assert inline_media(text) == upstream(text), text
