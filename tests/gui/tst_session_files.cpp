// The session files kept for the session reader's fuzz target (tests/fuzz/session/): real
// sessions, which open, and hostile ones, which are refused with a partita::Error naming the
// file; nothing else may come out of sessionFromJson.

#include "common/session.h"

#include "partita/graph/error.h"

#include <QtTest>

#include <filesystem>
#include <fstream>
#include <sstream>

using namespace partita;
using namespace partita::gui;

class TestSessionFiles : public QObject {
  Q_OBJECT
private Q_SLOTS:
  void keptFilesOpenOrAreRefused() {
    const auto dir = std::filesystem::path(PARTITA_SOURCE_DIR) / "tests/fuzz/session";
    int opened = 0, refused = 0;
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
      std::ifstream in(entry.path(), std::ios::binary);
      std::stringstream bytes;
      bytes << in.rdbuf();
      const std::string name = entry.path().filename().string();
      try {
        const auto state = sessionFromJson(bytes.str(), "fuzz-session.json");
        QVERIFY2(name.rfind("hostile-", 0) != 0, qPrintable(QString::fromStdString(name + " opened")));
        ++opened;
      } catch (const Error& e) {
        QVERIFY2(name.rfind("hostile-", 0) == 0, qPrintable(QString::fromStdString(name + ": " + e.what())));
        QVERIFY2(std::string(e.what()).find("fuzz-session.json") != std::string::npos, e.what());
        ++refused;
      }
    }
    QVERIFY(opened >= 3);
    QVERIFY(refused >= 9);
  }
};

QTEST_MAIN(TestSessionFiles)
#include "tst_session_files.moc"
