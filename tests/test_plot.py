import plot_log


def test_plot_writes_a_png(tmp_path):
    log = tmp_path / "log.txt"
    log.write_text("0 val 10.9\n0 hella 0.2500\n0 train 10.95\n1 train 9.5\n250 val 4.1\n250 hella 0.2600\n")
    series = plot_log.read_series(log)
    assert series["train"] == [(0, 10.95), (1, 9.5)] and series["hella"][-1] == (250, 0.26)
    out = tmp_path / "curves.png"
    assert plot_log.main([str(log), "-o", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bad_log_line_names_its_line(tmp_path, capsys):
    log = tmp_path / "log.txt"
    log.write_text("0 train 10.9\n1 train\n")
    assert plot_log.main([str(log), "-o", str(tmp_path / "x.png")]) == 1
    assert "log.txt:2:" in capsys.readouterr().err
    assert not (tmp_path / "x.png").exists()
    assert plot_log.main([str(tmp_path / "missing.txt")]) == 1
