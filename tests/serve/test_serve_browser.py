"""The explorer page in real headless Chromium against ``attnkit serve`` on 127.0.0.1.

Needs Chromium and its driver (Debian: ``apt-get install chromium chromium-driver``)
and the ``selenium`` package. Without them these tests skip, except under CI
(``CI=true``), where a missing browser is a failure: CI installs it (.ci/run).
"""

from __future__ import annotations

import json
import os
import shutil
import urllib.request

import pytest

from serve_helpers import CORPUS, ServerProcess, make_runs

pytestmark = pytest.mark.browser
INJECTED = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2"> "quoted"'


def _browser_parts() -> tuple[str, str]:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    try:
        import selenium  # noqa: F401
    except ImportError:
        driver = None
    if chromium is None or driver is None:
        message = "headless Chromium, chromedriver and selenium are needed for the browser tests"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"{message} (CI=true: install them, see .ci/run)")
        pytest.skip(message)
    return chromium, driver


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    _browser_parts()
    base = tmp_path_factory.mktemp("runs")
    served = ServerProcess(*make_runs(base).values(), base / "never_trained")  # one missing
    yield served
    assert served.stop() == 0


@pytest.fixture(scope="module")
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium, driver = _browser_parts()
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(flag)
    options.add_argument("--window-size=1280,1000")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    chrome = webdriver.Chrome(service=Service(driver), options=options)
    chrome.implicitly_wait(0)
    yield chrome
    chrome.quit()


def _wait(browser, css: str, count: int = 1):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(browser, 30).until(
        lambda b: (found := b.find_elements("css selector", css)) and len(found) >= count and found
    )


def _translate(browser, server, text: str):
    browser.get(server.url)
    _wait(browser, "#run option")
    box = browser.find_element("id", "text")
    box.clear()
    box.send_keys(text)
    browser.find_element("id", "translate").click()
    return _wait(browser, ".sentence")[0]


def _api(server, body: dict) -> dict:
    request = urllib.request.Request(
        server.url + "translate",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.load(response)


def test_the_page_loads_without_console_errors(server, browser):
    browser.get_log("browser")  # drain what earlier tests logged
    browser.get(server.url)
    _wait(browser, "#run option", 2)
    assert browser.title == "attnkit explorer"
    names = [o.text for o in browser.find_elements("css selector", "#run option")]
    assert names == ["rnn (rnn, toy copy task)", "transformer (transformer, toy copy task)"]
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == []


def test_the_page_names_a_run_folder_it_could_not_load(server, browser):
    browser.get(server.url)
    _wait(browser, "#run option", 2)
    note = browser.find_element("id", "missing-runs").text
    assert note.startswith("Not loaded: ") and "never_trained" in note and "not found" in note


def test_typing_a_sentence_shows_its_translation(server, browser):
    card = _translate(browser, server, "ein Hund rennt")
    expected = _api(server, {"text": "ein Hund rennt"})["sentences"][0]
    assert card.find_element("css selector", ".source").text == "ein Hund rennt"
    assert card.find_elements("css selector", ".hypotheses li")
    queries = [n.text for n in card.find_elements("css selector", ".tok.query")]
    assert queries == expected["tgt_tokens"]


def test_hovering_a_token_shades_the_other_side_by_the_api_weights(server, browser, tmp_path):
    from selenium.webdriver import ActionChains

    card = _translate(browser, server, "ein Mann geht nach Hause")
    expected = _api(server, {"text": "ein Mann geht nach Hause"})["sentences"][0]["weights"]
    for t, token in enumerate(card.find_elements("css selector", ".tok.query")):
        ActionChains(browser).move_to_element(token).perform()
        keys = card.find_elements("css selector", ".tok.key")
        shown = [float(k.get_attribute("data-weight")) for k in keys]
        assert shown == pytest.approx(expected[t], abs=1e-12)
        alphas = [_alpha(k.value_of_css_property("background-color")) for k in keys]
        # colour intensity = weight, to the 8 bits a colour's alpha keeps
        assert alphas == pytest.approx(expected[t], abs=1 / 255 + 1e-6)
    for s, key in enumerate(card.find_elements("css selector", ".tok.key")):  # and vice versa
        ActionChains(browser).move_to_element(key).perform()
        column = [
            float(q.get_attribute("data-weight"))
            for q in card.find_elements("css selector", ".tok.query")
        ]
        assert column == pytest.approx([row[s] for row in expected], abs=1e-12)
    token.click()
    assert "= 1.000000" in card.find_element("css selector", ".step .sum").text
    browser.save_screenshot(str(tmp_path / "explorer.png"))
    assert (tmp_path / "explorer.png").stat().st_size > 1000


def test_injected_markup_is_shown_as_text_and_never_runs(server, browser):
    card = _translate(browser, server, INJECTED)
    assert card.find_element("css selector", ".source").text == INJECTED
    assert browser.execute_script("return window.__pwned === undefined")
    assert browser.find_elements("css selector", ".sentence img") == []


def test_empty_input_shows_the_servers_error_message(server, browser):
    browser.get(server.url)
    _wait(browser, "#run option")
    browser.find_element("id", "translate").click()
    status = _wait(browser, "#translate-status.error")[0]
    assert "text is empty" in status.text
    assert browser.find_elements("css selector", ".sentence") == []


def test_a_translate_error_clears_the_previous_translations(server, browser):
    _translate(browser, server, "ein Hund rennt")
    box = browser.find_element("id", "text")
    box.clear()
    box.send_keys("ein " * 600)  # over the server's 2000 characters
    browser.find_element("id", "translate").click()
    status = _wait(browser, "#translate-status.error")[0]
    assert "the limit is 2000" in status.text
    assert browser.find_elements("css selector", ".sentence") == []  # none reads as this text's


def test_the_transformer_offers_layers_heads_and_self_attention(server, browser):
    from selenium.webdriver.support.ui import Select

    browser.get(server.url)
    _wait(browser, "#run option", 2)
    Select(browser.find_element("id", "run")).select_by_value("transformer")
    browser.find_element("id", "text").send_keys("ein Hund")
    browser.find_element("id", "translate").click()
    card = _wait(browser, ".sentence")[0]
    view = Select(card.find_element("css selector", ".view"))
    assert [o.get_attribute("value") for o in view.options] == [
        "alignment",
        "cross",
        "encoder",
        "decoder",
    ]
    view.select_by_value("encoder")
    keys = card.find_elements("css selector", ".tok.key")
    assert len(card.find_elements("css selector", ".tok.query")) == len(keys)
    assert len(card.find_elements("css selector", ".heatmap td")) == len(keys) ** 2


def test_the_worked_example_tab_shows_the_explain_numbers(server, browser):
    browser.get(server.url)
    browser.find_element("css selector", '[data-tab="explain-tab"]').click()
    browser.find_element("id", "explain").click()
    _wait(browser, "#explain-weights td", 3)
    cells = [c.text for c in browser.find_elements("css selector", "#explain-weights td")]
    assert cells == ["0.53", "0.17", "0.30"]  # README: weights ≈ [0.533, 0.168, 0.299]
    assert "weights" in browser.find_element("id", "explain-text").text


def test_an_exported_file_opens_from_disk_with_its_sentences(browser, tmp_path):
    from attnkit.nmt.decoding.translate import translate_lines
    from attnkit.nmt.runs.loaded_run import load_run
    from attnkit.serve import write_html
    from attnkit.serve.payload import sentence_payload

    run = load_run(make_runs(tmp_path)["transformer"])
    lines = [INJECTED, "ein Hund rennt"]
    translations = translate_lines(run, lines, n_best=5)
    records = [sentence_payload(run, t, i, n_best=5) for i, t in enumerate(translations, 1)]
    path = write_html(tmp_path / "t.html", records, beam_size=2)
    browser.get_log("browser")  # drain what earlier tests logged
    browser.get(path.as_uri())
    cards = _wait(browser, ".sentence", 2)
    assert [c.find_element("css selector", ".source").text for c in cards] == lines
    assert browser.execute_script("return window.__pwned === undefined")
    assert cards[1].find_elements("css selector", ".heatmap td")
    assert [e for e in browser.get_log("browser") if e["level"] == "SEVERE"] == []


def _alpha(css_colour: str) -> float:
    """The alpha of ``rgba(r, g, b, a)`` (1 for ``rgb(...)``)."""
    parts = css_colour[css_colour.index("(") + 1 : -1].split(",")
    return float(parts[3]) if len(parts) == 4 else 1.0


def test_the_causal_decoder_view_hatches_the_future_as_masked(server, browser):
    from selenium.webdriver.support.ui import Select

    browser.get(server.url)
    _wait(browser, "#run option", 2)
    Select(browser.find_element("id", "run")).select_by_value("transformer")
    browser.find_element("id", "text").send_keys("ein Hund rennt")
    browser.find_element("id", "translate").click()
    card = _wait(browser, ".sentence")[0]
    from selenium.webdriver.support.ui import Select

    Select(card.find_element("css selector", ".view")).select_by_value("decoder")
    rows = card.find_elements("css selector", ".heatmap tr")[1:]
    for i, row in enumerate(rows):
        cells = row.find_elements("css selector", "td")
        assert [c.get_attribute("class") == "masked" for c in cells] == [
            j > i for j in range(len(cells))
        ]
        assert all(c.text == "" for c in cells[i + 1 :])  # no "0.00" for the future
        assert all(c.text for c in cells[: i + 1])
    hatched = card.find_element("css selector", ".heatmap td.masked")
    assert "repeating-linear-gradient" in hatched.value_of_css_property("background-image")


def test_an_explain_error_clears_the_previous_result(server, browser):
    browser.get(server.url)
    browser.find_element("css selector", '[data-tab="explain-tab"]').click()
    browser.find_element("id", "explain").click()
    _wait(browser, "#explain-weights td", 3)
    keys = browser.find_element("id", "ex-keys")
    keys.clear()
    keys.send_keys("1,0; 0,1")  # widths differ from the query's 3
    browser.find_element("id", "explain").click()
    status = _wait(browser, "#explain-status.error")[0]
    assert status.text
    assert browser.find_elements("css selector", "#explain-weights td") == []
    assert browser.find_element("id", "explain-text").text == ""


def test_the_worked_example_hatches_masked_keys(server, browser):
    browser.get(server.url)
    browser.find_element("css selector", '[data-tab="explain-tab"]').click()
    browser.find_element("id", "ex-mask").send_keys("1,0,1")
    browser.find_element("id", "explain").click()
    cells = _wait(browser, "#explain-weights td", 3)
    assert [c.get_attribute("class") == "masked" for c in cells] == [False, True, False]


@pytest.mark.parametrize("mask", ["yes,no,yes", "1,2,1", "true,false,true"])
def test_a_mask_of_other_than_0_and_1_is_an_error_not_may_attend(server, browser, mask):
    browser.get(server.url)
    browser.find_element("css selector", '[data-tab="explain-tab"]').click()
    browser.find_element("id", "ex-mask").send_keys(mask)
    browser.find_element("id", "explain").click()
    status = _wait(browser, "#explain-status.error")[0]
    assert "mask" in status.text
    assert browser.find_elements("css selector", "#explain-weights td") == []


MATRIX_TYPOS = [  # each as `attnkit explain` words it, never silently read as other numbers
    ("ex-query", "2,,1", "query row 1, entry 2 is empty (two commas in a row?)"),
    ("ex-query", "2,x,1", "query row 1, entry 2: 'x' is not a number"),
    ("ex-keys", "1,0,0; 0,1,0;", "keys row 3 is empty"),
    ("ex-keys", "1,0,0; 0,1", "keys rows have different lengths: row 1 has 3 numbers, row 2 has 2"),
    ("ex-values", "1e400", "values row 1, entry 1: '1e400' is not a finite number"),
]


@pytest.mark.parametrize(("field", "text", "message"), MATRIX_TYPOS)
def test_a_typo_in_a_worked_example_matrix_is_named_by_row_and_entry(
    server, browser, field, text, message
):
    browser.get(server.url)
    browser.find_element("css selector", '[data-tab="explain-tab"]').click()
    box = browser.find_element("id", field)
    box.clear()
    box.send_keys(text)
    browser.find_element("id", "explain").click()
    status = _wait(browser, "#explain-status.error")[0]
    assert status.text == message
    assert browser.find_elements("css selector", "#explain-weights td") == []


# The page's first POST /translate is sent at once but its answer held until
# window.__release(done) is called; `done` runs once the page has handled it.
HOLD_FIRST_TRANSLATION = """
const send = window.postJSON;
let held = false;
window.postJSON = (path, body) => {
  if (path !== "translate" || held) return send(path, body);
  held = true;
  const answer = send(path, body);
  return new Promise((resolve, reject) => {
    window.__release = (done) => {
      answer.then(resolve, reject);
      answer.finally(() => setTimeout(done, 0)).catch(() => {});
    };
  });
};
"""


def test_an_earlier_translation_answering_late_never_replaces_the_latest(server, browser):
    browser.get(server.url)
    _wait(browser, "#run option", 2)
    browser.execute_script(HOLD_FIRST_TRANSLATION)
    box = browser.find_element("id", "text")
    box.send_keys("ein Mann geht nach Hause")  # its answer comes last
    browser.find_element("id", "translate").click()
    box.clear()
    box.send_keys("zwei Frauen essen")
    browser.find_element("id", "translate").click()
    _wait(browser, ".sentence")
    browser.execute_async_script("window.__release(arguments[0])")
    sources = [n.text for n in browser.find_elements("css selector", ".sentence .source")]
    assert sources == ["zwei Frauen essen"]  # the text in the box, not the earlier one
    assert browser.find_element("id", "translate-status").text == "run rnn, beam 2"


def test_the_active_tab_is_announced_not_only_coloured(server, browser):
    browser.get(server.url)
    tabs = _wait(browser, ".tab", 2)
    assert [t.get_attribute("aria-pressed") for t in tabs] == ["true", "false"]
    tabs[1].click()
    assert [t.get_attribute("aria-pressed") for t in tabs] == ["false", "true"]


def test_the_view_layer_and_head_pickers_are_labelled(server, browser):
    _translate(browser, server, "ein Hund rennt")
    pickers = browser.find_elements("css selector", ".sentence .controls select")
    assert [p.accessible_name for p in pickers] == ["view", "layer", "head"]


def test_a_keyboard_alone_reaches_an_output_token_and_opens_its_step(server, browser):
    from selenium.webdriver import ActionChains
    from selenium.webdriver.common.keys import Keys

    card = _translate(browser, server, "ein Hund rennt")
    expected = _api(server, {"text": "ein Hund rennt"})["sentences"][0]["weights"]
    first = card.find_element("css selector", ".tok.query")
    for _ in range(20):  # from the Translate button through the card
        ActionChains(browser).send_keys(Keys.TAB).perform()
        if browser.switch_to.active_element == first:
            break
    assert browser.switch_to.active_element == first
    keys = card.find_elements("css selector", ".tok.key")
    assert [float(k.get_attribute("data-weight")) for k in keys] == pytest.approx(expected[0])
    ActionChains(browser).send_keys(Keys.ENTER).perform()
    assert "= 1.000000" in card.find_element("css selector", ".step .sum").text


def test_a_right_to_left_sentence_reads_right_to_left(server, browser):
    card = _translate(browser, server, "שלום עולם.\nein Hund rennt.")
    direction = [
        e.value_of_css_property("direction")
        for e in [
            browser.find_element("id", "text"),
            *browser.find_elements("css selector", ".source"),
        ]
    ]
    assert direction == ["rtl", "rtl", "ltr"]  # the box (first line), each source as its text
    assert card.find_element("css selector", ".source").text == "שלום עולם."


def test_a_long_sentences_heatmap_scrolls_in_its_card_in_a_narrow_window(server, browser):
    from selenium.webdriver.support.ui import Select

    narrow = {"width": 400, "height": 800, "deviceScaleFactor": 1, "mobile": False}
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", narrow)
    try:
        browser.get(server.url)
        _wait(browser, "#run option", 2)
        Select(browser.find_element("id", "run")).select_by_value("transformer")
        browser.find_element("id", "text").send_keys(" ".join(CORPUS * 3))  # 42 tokens
        browser.find_element("id", "translate").click()
        _wait(browser, ".heatmap td")
        page, window, heatmap, shown = browser.execute_script(
            "const h = document.querySelector('.heatmap'), page = document.documentElement;"
            "return [page.scrollWidth, innerWidth, h.scrollWidth, h.clientWidth]"
        )
    finally:
        browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    assert page <= window == 400  # the page itself never scrolls sideways
    assert heatmap > shown  # the wide heatmap scrolls inside its card


def test_a_stopped_server_is_named_in_the_error_not_failed_to_fetch(browser, tmp_path):
    gone = ServerProcess(make_runs(tmp_path)["rnn"])
    browser.get(gone.url)
    _wait(browser, "#run option")
    assert gone.stop() == 0
    browser.find_element("id", "text").send_keys("ein Hund rennt")
    browser.find_element("id", "translate").click()
    status = _wait(browser, "#translate-status.error")[0]
    origin = gone.url.rstrip("/")
    assert status.text == f"no answer from the server at {origin}: is attnkit serve still running?"


def test_the_status_names_the_run_and_search_beside_any_warning(server, browser):
    from selenium.webdriver.support.ui import Select, WebDriverWait

    _translate(browser, server, " ".join(CORPUS[:2]))  # 11 tokens: over the rnn's 8
    status = browser.find_element("id", "translate-status")
    warning = "line 1: 11 tokens, truncated to the model's limit of 8"
    assert status.text == f"run rnn, beam 2. {warning}"
    Select(browser.find_element("id", "run")).select_by_value("transformer")
    browser.find_element("id", "beam").send_keys("1")
    browser.find_element("id", "translate").click()
    WebDriverWait(browser, 30).until(lambda _: status.text != "translating…")
    assert status.text == "run transformer, greedy search"


def test_an_empty_translation_says_so_instead_of_showing_nothing(browser, tmp_path):
    from attnkit.nmt.decoding.translate import translate_lines
    from attnkit.nmt.runs.loaded_run import load_run
    from attnkit.serve import write_html
    from attnkit.serve.payload import sentence_payload

    run = load_run(make_runs(tmp_path)["rnn"])
    [translation] = translate_lines(run, ["ein Hund"], n_best=2)
    record = sentence_payload(run, translation, 1, n_best=2)
    record["views"]["cross"] = [[record["weights"][-1:]]]  # as if the model ended at once
    record.update(translation="", tgt_tokens=["</s>"], weights=record["weights"][-1:])
    record["hypotheses"][0].update(translation="", tgt_tokens=["</s>"])
    browser.get(write_html(tmp_path / "empty.html", [record], beam_size=2).as_uri())
    card = _wait(browser, ".sentence")[0]
    empty = "(empty: the model ended at once)"
    assert card.find_element("css selector", ".translation").text == empty
    assert card.find_element("css selector", ".hyp-text").text == empty


def test_the_step_table_calls_only_a_masked_key_masked(browser, tmp_path):
    """A cross-attention weight of 0 is an underflow (nothing is masked there); a causal
    view's future is masked."""
    from attnkit.nmt.decoding.translate import translate_lines
    from attnkit.nmt.runs.loaded_run import load_run
    from attnkit.serve import write_html
    from attnkit.serve.payload import sentence_payload

    run = load_run(make_runs(tmp_path)["transformer"])
    [translation] = translate_lines(run, ["ein Hund rennt"], n_best=1)
    record = sentence_payload(run, translation, 1, n_best=1)
    for row in record["weights"]:  # (T, S): the first key's weight underflowed to 0
        row[1] += row[0]
        row[0] = 0.0
    assert len(record["views"]["decoder_inputs"]) > 1  # a future key for the first step
    browser.get(write_html(tmp_path / "zero.html", [record], beam_size=2).as_uri())
    card = _wait(browser, ".sentence")[0]
    card.find_element("css selector", ".tok.query").click()
    cells = card.find_elements("css selector", ".step td")
    assert cells[2].text == "−inf (the weight underflows to 0)"
    from selenium.webdriver.support.ui import Select

    Select(card.find_element("css selector", ".view")).select_by_value("decoder")
    card.find_element("css selector", ".tok.query").click()  # step 0 sees only itself
    cells = card.find_elements("css selector", ".step td")
    assert cells[5].text == "−inf (masked)"


def test_a_guided_runs_page_names_the_supervised_heads_it_shows(browser, tmp_path):
    from selenium.webdriver.support.ui import Select

    from attnkit.nmt.data.tokenizer import WordTokenizer
    from attnkit.nmt.decoding.translate import translate_lines
    from attnkit.nmt.runs.loaded_run import load_run
    from attnkit.serve import write_html
    from attnkit.serve.payload import sentence_payload
    from conftest_nmt import make_run

    model = {"arch": "transformer", "d_model": 8, "heads": 2, "encoder_layers": 1,
             "decoder_layers": 2, "ff_dim": 16}  # fmt: skip
    guided = {"guided_alignment": {"file": "x.align", "layer": 0}}
    folder = make_run(tmp_path, WordTokenizer.train(CORPUS), model=model, train=guided)
    run = load_run(folder)
    (t,) = translate_lines(run, ["ein Hund rennt"], n_best=1)
    path = write_html(tmp_path / "t.html", [sentence_payload(run, t, 1, n_best=1)], beam_size=2)
    browser.get(path.as_uri())
    card = _wait(browser, ".sentence")[0]
    view = Select(card.find_element("css selector", ".view"))
    assert (
        view.first_selected_option.text == "alignment (supervised heads: layer 0, head 0, shift 1)"
    )
    cells = card.find_elements("css selector", ".heatmap td[data-weight]")
    shown = [float(c.get_attribute("data-weight")) for c in cells]
    assert shown == pytest.approx(t.weights.flatten().tolist(), abs=1e-6)

    def pickers():  # the layer and head the (disabled) pickers beside the view show
        return [Select(card.find_element("css selector", c)).first_selected_option.text
                for c in (".layer", ".head")]  # fmt: skip

    assert pickers() == ["—", "—"]  # not "layer 1, head mean": the view names its own
    view.select_by_value("cross")
    assert pickers() == ["1", "mean"]
    view.select_by_value("alignment")
    assert pickers() == ["—", "—"]


def test_a_mean_of_heads_is_not_explained_as_one_softmax_of_scores(browser, tmp_path):
    from selenium.webdriver.support.ui import Select

    from attnkit.nmt.decoding.translate import translate_lines
    from attnkit.nmt.runs.loaded_run import load_run
    from attnkit.serve import write_html
    from attnkit.serve.payload import sentence_payload

    run = load_run(make_runs(tmp_path)["transformer"])  # several heads: search averages them
    [translation] = translate_lines(run, ["ein Hund rennt"], n_best=1)
    record = sentence_payload(run, translation, 1, n_best=1)
    browser.get(write_html(tmp_path / "mean.html", [record], beam_size=2).as_uri())
    card = _wait(browser, ".sentence")[0]

    def step_header_and_notes():
        card.find_element("css selector", ".tok.query").click()
        header = card.find_elements("css selector", ".step th")[2].text
        return header, len(card.find_elements("css selector", ".step .averaged"))

    assert step_header_and_notes() == ("log w_j", 1)
    Select(card.find_element("css selector", ".view")).select_by_value("cross")
    Select(card.find_element("css selector", ".head")).select_by_value("0")
    assert step_header_and_notes() == ("log w_j = s_j − logΣexp(s)", 0)


def test_an_ensembles_mean_of_models_is_not_explained_as_one_softmax(browser, tmp_path):
    from attnkit.nmt.decoding.translate import translate_lines
    from attnkit.nmt.runs.loaded_run import load_run
    from attnkit.serve import write_html
    from attnkit.serve.payload import sentence_payload

    run = load_run(make_runs(tmp_path)["rnn"])  # one attention: alone, one softmax
    [translation] = translate_lines(run, ["ein Hund rennt"], n_best=1)
    headers = []
    for label in ("search", "search, the mean of 2 models' views"):
        translation.weights_from = label  # as translate_lines names an ensemble's
        record = sentence_payload(run, translation, 1, n_best=1)
        browser.get(write_html(tmp_path / "e.html", [record], beam_size=2).as_uri())
        card = _wait(browser, ".sentence")[0]
        card.find_element("css selector", ".tok.query").click()
        headers.append(card.find_elements("css selector", ".step th")[2].text)
    assert headers == ["log w_j = s_j − logΣexp(s)", "log w_j"]


def _narrow(browser, width: int = 360):
    """Emulate a window ``width`` CSS pixels wide (a phone, or 200% zoom of a small one)."""
    metrics = {"width": width, "height": 800, "deviceScaleFactor": 1, "mobile": False}
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)


# The texts of the cells under `selector` that the browser laid out on more than one line.
BROKEN_CELLS = """
return [...document.querySelectorAll(arguments[0])].filter((cell) => {
  const range = document.createRange();
  range.selectNodeContents(cell);
  const tops = new Set([...range.getClientRects()].map((r) => Math.round(r.top)));
  return tops.size > 1;
}).map((cell) => cell.textContent);
"""


def test_heatmap_and_step_numbers_never_break_across_lines_in_a_narrow_window(server, browser):
    from selenium.webdriver.support.ui import Select

    _narrow(browser)
    try:
        browser.get(server.url)
        _wait(browser, "#run option", 2)
        Select(browser.find_element("id", "run")).select_by_value("transformer")
        browser.find_element("id", "text").send_keys(" ".join(CORPUS))  # 14 tokens
        browser.find_element("id", "translate").click()
        _wait(browser, ".heatmap td")
        browser.find_element("css selector", ".tok.query").click()
        broken = browser.execute_script(
            BROKEN_CELLS,
            ".heatmap th, .heatmap td, .step td",  # a step's headers wrap at spaces
        )
        width = browser.execute_script("return document.documentElement.scrollWidth")
    finally:
        browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    assert broken == []  # "0.6" over "3" read as two numbers, "</s>" as "</" over "s>"
    assert width <= 360  # the tables scroll inside the card, the page never sideways


def test_a_wide_worked_example_scrolls_in_its_box_in_a_narrow_window(server, browser):
    _narrow(browser)
    try:
        browser.get(server.url)
        browser.find_element("css selector", '[data-tab="explain-tab"]').click()
        keys = browser.find_element("id", "ex-keys")
        keys.clear()
        keys.send_keys("; ".join(["1,0,0"] * 32))  # 32 keys, the most explain takes
        browser.find_element("id", "explain").click()
        _wait(browser, "#explain-weights td", 32)
        broken = browser.execute_script(BROKEN_CELLS, "#explain-weights th, #explain-weights td")
        page, box, table = browser.execute_script(
            "const box = document.getElementById('explain-weights');"
            "return [document.documentElement.scrollWidth, box.clientWidth, box.scrollWidth]"
        )
    finally:
        browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    assert broken == []
    assert page <= 360 < table and box < table  # the heatmap scrolls, not the page


# Every weight 0, 0.01, ..., 1 drawn as the page draws it, in a card: each cell's text
# colour and background (rgba over the card's white), as computed by the browser.
PAINTED_WEIGHTS = """
const card = document.createElement("div");
card.className = "sentence";
const weights = [...Array(101).keys()].map((i) => i / 100);
card.append(heatmap([weights], ["q"], weights.map(String)));
document.getElementById("results").replaceChildren(card);
return [...card.querySelectorAll("td")].map((td) => {
  const style = getComputedStyle(td);
  return [Number(td.dataset.weight), style.color, style.backgroundColor];
});
"""


def _rgba(css_colour: str) -> tuple[float, ...]:
    parts = [float(x) for x in css_colour[css_colour.index("(") + 1 : -1].split(",")]
    return tuple(parts) if len(parts) == 4 else (*parts, 1.0)


def _contrast(ink: str, background: str, under=(255.0, 255.0, 255.0)) -> float:
    """WCAG 2 contrast ratio of text ``ink`` on ``background`` composited over ``under``."""

    def luminance(rgb):
        linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4
                  for c in (x / 255 for x in rgb)]  # fmt: skip
        return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]

    *rgb, alpha = _rgba(background)
    shown = [alpha * c + (1 - alpha) * u for c, u in zip(rgb, under, strict=True)]
    light, dark = sorted([luminance(_rgba(ink)[:3]), luminance(shown)], reverse=True)
    return (light + 0.05) / (dark + 0.05)


def test_every_heatmap_number_has_aa_contrast_on_its_shade(server, browser):
    browser.get(server.url)
    _wait(browser, "#run option")
    cells = browser.execute_script(PAINTED_WEIGHTS)
    assert len(cells) == 101
    low = [(w, round(_contrast(ink, shade), 2)) for w, ink, shade in cells]
    assert [(w, ratio) for w, ratio in low if ratio < 4.5] == []  # WCAG AA, normal text


def _descriptions(browser, css: str) -> list[str]:
    """The accessible description (what a screen reader reads after the name) of each node."""
    root = browser.execute_cdp_cmd("DOM.getDocument", {"depth": 0})["root"]["nodeId"]
    found = browser.execute_cdp_cmd("DOM.querySelectorAll", {"nodeId": root, "selector": css})
    described = []
    for node in found["nodeIds"]:
        tree = browser.execute_cdp_cmd(
            "Accessibility.getPartialAXTree", {"nodeId": node, "fetchRelatives": False}
        )
        described.append(tree["nodes"][0].get("description", {}).get("value", ""))
    return described


def test_a_screen_reader_hears_where_a_focused_token_looked(server, browser):
    """The shading a focused token shows is colour only: its description says it in words."""
    _translate(browser, server, "ein Mann geht nach Hause")
    expected = _api(server, {"text": "ein Mann geht nach Hause"})["sentences"][0]
    weights, src, tgt = expected["weights"], expected["src_tokens"], expected["tgt_tokens"]

    def strongest(row, labels):
        best = max(range(len(row)), key=row.__getitem__)
        return f"{labels[best]} ({row[best]:.2f})"

    assert _descriptions(browser, ".tok.query") == [
        f"looks most at {strongest(row, src)}" for row in weights
    ]
    columns = [list(column) for column in zip(*weights, strict=True)]
    assert _descriptions(browser, ".tok.key") == [
        f"weighed most by {strongest(column, tgt)}" for column in columns
    ]


def test_a_worked_example_says_in_its_status_that_it_is_ready(server, browser):
    """The status is a live region: an empty one told a screen reader nothing happened."""
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(server.url)
    browser.find_element("css selector", '[data-tab="explain-tab"]').click()
    query = browser.find_element("id", "ex-query")
    query.clear()
    query.send_keys("2,0,1; 1,1,1")
    browser.find_element("id", "explain").send_keys(Keys.ENTER)
    _wait(browser, "#explain-weights td", 6)
    status = browser.find_element("id", "explain-status")
    assert status.get_attribute("role") == "status"
    assert status.text == "2 queries over 3 keys: the weights and the worked example are below"
    query.clear()
    query.send_keys("2,0,1")
    browser.find_element("id", "explain").send_keys(Keys.ENTER)
    _wait(browser, "#explain-weights td", 3)
    WebDriverWait(browser, 30).until(lambda _: "1 query" in status.text)
    assert status.text == "1 query over 3 keys: the weights and the worked example are below"


def test_a_focused_tokens_outline_stands_out_from_the_card(server, browser):
    """A focus indicator needs 3:1 against what surrounds it (WCAG 1.4.11)."""
    from selenium.webdriver.common.keys import Keys

    card = _translate(browser, server, "ein Hund rennt")
    first = card.find_element("css selector", ".tok.query")
    card.find_elements("css selector", ".tok.key")[-1].send_keys(Keys.TAB)  # the keyboard's
    assert browser.switch_to.active_element == first
    style, width, colour = (
        first.value_of_css_property(p) for p in ("outline-style", "outline-width", "outline-color")
    )
    background = card.value_of_css_property("background-color")
    assert style == "solid" and float(width.removesuffix("px")) >= 2
    assert _contrast(colour, background) >= 3


def test_a_long_run_name_fits_a_narrow_window(browser, tmp_path):
    """The run picker was as wide as its longest name: a run named as experiments are
    widened the page past a phone's 360px, the picker cut off and the page scrolling."""
    from attnkit.nmt.data.tokenizer import WordTokenizer
    from conftest_nmt import make_run

    long = tmp_path / "transformer-multi30k-de-en-bpe8000-beam5-averaged"
    long.mkdir()
    served = ServerProcess(make_run(long, WordTokenizer.train(CORPUS)))
    _narrow(browser)
    try:
        browser.get(served.url)
        _wait(browser, "#run option")
        wide = browser.execute_script(
            "return [...document.querySelectorAll('main *')]"
            ".filter((e) => e.getBoundingClientRect().right > innerWidth).map((e) => e.tagName)"
        )
        page = browser.execute_script("return document.documentElement.scrollWidth")
        picked = browser.find_element("id", "run").get_attribute("value")
    finally:
        browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
        assert served.stop() == 0
    assert picked == long.name
    assert wide == [] and page <= 360


def test_the_sentence_box_keeps_a_visible_label_once_typed_in(server, browser):
    """A placeholder is no label: it vanishes as one types, and voice control has no
    visible name to say ("click Sentences")."""
    browser.get(server.url)
    box = _wait(browser, "#text")[0]
    box.send_keys("ein Hund rennt")
    form = browser.find_element("id", "translate-form").text  # what is shown, typed text aside
    assert box.accessible_name == "Sentences, one per line"
    assert box.accessible_name in form


def test_high_contrast_mode_keeps_the_weights_shades(server, browser):
    """Forced colours (Windows High Contrast) drop background colours: the shading a hovered
    token shows, and the heatmap's, vanished, leaving hovering nothing to show."""
    from selenium.webdriver import ActionChains

    forced = {"features": [{"name": "forced-colors", "value": "active"}]}
    browser.execute_cdp_cmd("Emulation.setEmulatedMedia", forced)
    try:
        card = _translate(browser, server, "ein Mann geht nach Hause")
        assert browser.execute_script("return matchMedia('(forced-colors: active)').matches")
        query = card.find_element("css selector", ".tok.query")
        ActionChains(browser).move_to_element(query).perform()
        shaded = [
            *card.find_elements("css selector", ".tok.key"),
            *card.find_elements("css selector", ".heatmap td"),
        ]
        shown = [
            (float(node.get_attribute("data-weight")), *map(node.value_of_css_property, COLOURS))
            for node in shaded
        ]
        under = [
            card.find_element("css selector", css).value_of_css_property("background-color")
            for css in (".keys", ".heatmap table")
        ]
    finally:
        browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})
    assert under == ["rgba(255, 255, 255, 1)"] * 2  # the shades' base, as without forced colours
    for weight, ink, shade in shown:
        assert _rgba(shade)[:3] == (30, 90, 200)  # not the theme's background, shade lost
        assert _alpha(shade) == pytest.approx(weight, abs=1 / 255 + 1e-6)
        assert _contrast(ink, shade) >= 4.5


COLOURS = ("color", "background-color")


def _names(browser, css: str) -> list[str]:
    """The accessible name (what a screen reader announces entering it) of each node."""
    root = browser.execute_cdp_cmd("DOM.getDocument", {"depth": 0})["root"]["nodeId"]
    found = browser.execute_cdp_cmd("DOM.querySelectorAll", {"nodeId": root, "selector": css})
    return [
        browser.execute_cdp_cmd(
            "Accessibility.getPartialAXTree", {"nodeId": node, "fetchRelatives": False}
        )["nodes"][0]
        .get("name", {})
        .get("value", "")
        for node in found["nodeIds"]
    ]


def test_each_heatmap_is_named_by_what_it_shows(server, browser):
    """An unnamed table read as 'table, 5 rows, 6 columns': which attention, and which
    of rows and columns are the queries, a screen reader user could not tell."""
    from selenium.webdriver.support.ui import Select

    browser.get(server.url)
    _wait(browser, "#run option", 2)
    Select(browser.find_element("id", "run")).select_by_value("transformer")
    browser.find_element("id", "text").send_keys("ein Hund rennt")
    browser.find_element("id", "translate").click()
    card = _wait(browser, ".heatmap td")[0].find_element("xpath", "ancestor::div[1]/..")
    names = [_names(browser, ".heatmap table")[0]]
    Select(card.find_element("css selector", ".view")).select_by_value("cross")
    Select(card.find_element("css selector", ".head")).select_by_value("0")
    names += _names(browser, ".heatmap table")
    browser.find_element("css selector", '[data-tab="explain-tab"]').click()
    browser.find_element("id", "explain").click()
    _wait(browser, "#explain-weights td", 3)
    names += _names(browser, "#explain-weights table")
    rows_and_columns = "a row per query, a column per key"
    assert names == [
        f"alignment (search): {rows_and_columns}",
        f"cross-attention, layer 1, head 0: {rows_and_columns}",
        f"attention weights: {rows_and_columns}",
    ]


def test_opening_a_step_with_the_keyboard_is_announced(server, browser):
    """Enter on an output token opens its step below the heatmap, out of sight of a screen
    reader's cursor: a live region says it opened, and where."""
    from selenium.webdriver import ActionChains
    from selenium.webdriver.common.keys import Keys

    card = _translate(browser, server, "ein Hund rennt")
    expected = _api(server, {"text": "ein Hund rennt"})["sentences"][0]
    said = card.find_element("css selector", "[role=status]")
    assert said.get_attribute("textContent") == ""
    queries = card.find_elements("css selector", ".tok.query")
    card.find_elements("css selector", ".tok.key")[-1].send_keys(Keys.TAB)  # the queries' row
    ActionChains(browser).send_keys(Keys.ARROW_RIGHT, Keys.ENTER).perform()
    keys = len(expected["src_tokens"])
    token = expected["tgt_tokens"][1]
    assert browser.switch_to.active_element == queries[1]
    assert said.get_attribute("textContent") == (
        f"step for “{token}” opened below the heatmap: the weights of its {keys} keys"
    )


def test_a_token_row_is_one_tab_stop_and_the_arrow_keys_move_along_it(server, browser):
    """Every token was its own Tab stop: a keyboard user pressed Tab 2 x 256 times to get
    past one long sentence's card. Now Tab enters a row (the keys, the queries) once."""
    from selenium.webdriver import ActionChains
    from selenium.webdriver.common.keys import Keys

    card = _translate(browser, server, "ein Mann geht nach Hause")
    weights = _api(server, {"text": "ein Mann geht nach Hause"})["sentences"][0]["weights"]
    keys = card.find_elements("css selector", ".tok.key")
    queries = card.find_elements("css selector", ".tok.query")
    rows = card.find_elements("css selector", ".tokens")
    assert [(r.get_attribute("role"), r.accessible_name) for r in rows] == [
        ("toolbar", "keys"),
        ("toolbar", "queries"),
    ]

    def press(*keys_pressed):
        ActionChains(browser).send_keys(*keys_pressed).perform()
        return browser.switch_to.active_element

    card.find_element("css selector", ".view").send_keys(Keys.TAB)  # from the view picker
    assert browser.switch_to.active_element == keys[0]
    assert press(Keys.ARROW_RIGHT) == keys[1]
    shown = [float(q.get_attribute("data-weight")) for q in queries]  # focus shades, as before
    assert shown == pytest.approx([row[1] for row in weights], abs=1e-12)
    assert press(Keys.END) == keys[-1]
    assert press(Keys.ARROW_RIGHT) == keys[-1]  # the row's end: focus stays
    assert press(Keys.HOME) == keys[0]
    assert press(Keys.ARROW_LEFT) == keys[0]
    assert press(Keys.ARROW_RIGHT, Keys.TAB) == queries[0]  # the next row, at once
    assert press(Keys.ARROW_RIGHT, Keys.TAB) not in keys + queries  # past the card's tokens
    stops = [q.get_attribute("tabindex") for q in queries]  # Tab comes back where it left
    assert stops == ["-1", "0"] + ["-1"] * (len(queries) - 2)


@pytest.mark.parametrize(
    ("languages", "expected"),
    [({"source": "de", "target": "en"}, ["de", "en", "en"]), (None, [""] * 3)],
)
def test_each_text_is_marked_with_its_language_for_a_screen_readers_voice(
    browser, tmp_path, languages, expected
):
    """A German source on a page of lang="en" was read with an English voice."""
    from attnkit.nmt.decoding.translate import translate_lines
    from attnkit.nmt.runs.loaded_run import load_run
    from attnkit.serve import write_html
    from attnkit.serve.payload import sentence_payload

    run = load_run(make_runs(tmp_path)["rnn"])
    [translation] = translate_lines(run, ["ein Hund rennt"], n_best=2)
    record = sentence_payload(run, translation, 1, n_best=2)
    page = write_html(tmp_path / "lang.html", [record], beam_size=2, languages=languages)
    browser.get(page.as_uri())
    card = _wait(browser, ".sentence")[0]
    marked = [
        card.find_element("css selector", css).get_attribute("lang") or ""
        for css in (".source", ".translation", ".hyp-text")
    ]
    assert marked == expected


def test_a_typeset_minus_sign_in_a_worked_example_reads_as_a_minus(server, browser):
    def weights(query):
        browser.get(server.url)
        browser.find_element("css selector", '[data-tab="explain-tab"]').click()
        box = browser.find_element("id", "ex-query")
        box.clear()
        box.send_keys(query)
        browser.find_element("id", "explain").click()
        return [c.text for c in _wait(browser, "#explain-weights td", 3)]

    assert weights("2,0,\u22121") == weights("2,0,-1") != weights("2,0,1")
