#include "app/help.h"

#include "common/analysis.h"
#include "common/format.h"

#include <QApplication>
#include <QDialog>
#include <QDialogButtonBox>
#include <QMessageBox>
#include <QTextBrowser>
#include <QVBoxLayout>

namespace partita::gui {

QString helpHtml() {
  QString families;
  for (const auto* f : offered_families()) {
    families +=
        QStringLiteral("<tr><td><b>%1</b></td><td>%2</td><td>%3</td></tr>")
            .arg(qs(f->name()).toHtmlEscaped(), qs(f->title()).toHtmlEscaped(), qs(f->description()).toHtmlEscaped());
  }
  return QObject::tr(
             "<h2>Partita</h2>"
             "<p>Open a model (File &gt; Open ONNX, or a built-in model of the zoo), describe the cluster, pick "
             "a strategy family and the number of devices, and Evaluate (F5). Every layer's split, time and "
             "memory appear in the layer table, the charts and the graph; Compare (F6) evaluates every family "
             "and marks in bold the fastest that fits the device memory; the Run tab runs the plan for real "
             "with partita-run and lays the measured times beside the predicted ones.</p>"
             "<h3>Strategy families</h3><table cellspacing='6'>%1</table>"
             "<h3>Reading a configuration</h3>"
             "<p>Each op is a loop nest over its iteration dimensions, named by the op (a matrix product's "
             "<i>m</i>, <i>n</i> and reduction <i>k</i>; a convolution's batch, channels and pixels; "
             "<i>d0</i>, <i>d1</i>... for an element-wise op's dimensions; a batched product's <i>b0</i>...). "
             "The same letter can mean different things in different ops: hover a configuration, or select "
             "the op and read the inspector, for each dimension's meaning and size.</p>"
             "<ul><li><b>k:8</b> — the dimension k is split 8 ways: each device computes one eighth.</li>"
             "<li><b>b0:4 n:2</b> — two dimensions split at once: 4 x 2 = 8 pieces on 8 devices.</li>"
             "<li><b>x2 copies</b> — the pieces are computed on 2 groups of devices each, the same work "
             "twice (the devices beyond the split's product).</li>"
             "<li><b>replicated</b> — no split: every device computes the whole op.</li>"
             "<li>A split of a reduction dimension (a product's k) leaves partial sums that are all-reduced: "
             "the op's communication.</li></ul>"
             "<h3>What an iteration time is made of</h3>"
             "<ul><li><b>compute</b> — the op's kernels, forward and backward, from the device's calibrated "
             "compute and memory rates.</li>"
             "<li><b>communication</b> — collectives inside an op (partial sums, halos, statistics).</li>"
             "<li><b>redistribution</b> — moving a tensor between the layout its producer wrote and the one its "
             "reader needs.</li>"
             "<li><b>gradient sync</b> — the weights' gradients summed over their data-parallel replicas.</li>"
             "<li><b>optimizer step</b> — SGD, momentum or Adam on each weight shard (and ZeRO's gathers).</li>"
             "<li><b>pipeline bubble</b> — stages waiting for each other (pipeline families).</li></ul>"
             "<p>Memory per device: weights, gradients, optimizer state (with fp32 master weights in mixed "
             "precision), the activations the backward pass keeps, and the largest transient buffers.</p>"
             "<h3>Keys</h3><p>F5 Evaluate, F6 Compare all families, Ctrl+O open a model, Ctrl+S save the "
             "session, F1 this help.</p>")
      .arg(families);
}

QString aboutHtml() {
  return QObject::tr("<h3>Partita %1</h3>"
                     "<p>An explorer of parallelization strategies for training deep neural networks: for every layer, "
                     "how it can be split over devices, which split the optimizer picks, and what it costs in time and "
                     "memory; then the plan run for real over MPI (oneDNN on CPUs, cuBLAS/cuDNN/NCCL on GPUs) and "
                     "measured against the prediction.</p>"
                     "<p>Strategy families after: Pal et al. 2019 (hybrid data and model parallelism), Joo &amp; Youn "
                     "2021 (group hybrid parallelism), Elango 2021 (PaSE, per-layer search by dynamic programming), "
                     "Zhao et al. 2020 (BaPipe, balanced pipelines), Gholami et al. 2018 (the Pr x Pc grid), "
                     "Shoeybi et al. 2019 and Narayanan et al. 2021 (Megatron-LM), Krizhevsky 2014 (one weird "
                     "trick).</p>"
                     "<p>Built with Qt %2.</p>")
      .arg(QApplication::applicationVersion().isEmpty() ? QStringLiteral("(development)")
                                                        : QApplication::applicationVersion(),
           QString::fromLatin1(qVersion()));
}

QDialog* makeHelpDialog(QWidget* parent) {
  auto* dialog = new QDialog(parent);
  dialog->setAttribute(Qt::WA_DeleteOnClose);
  dialog->setWindowTitle(QObject::tr("Partita Help"));
  auto* text = new QTextBrowser(dialog);
  text->setHtml(helpHtml());
  auto* buttons = new QDialogButtonBox(QDialogButtonBox::Close, dialog);
  QObject::connect(buttons, &QDialogButtonBox::rejected, dialog, &QDialog::close);
  auto* layout = new QVBoxLayout(dialog);
  layout->addWidget(text, 1);
  layout->addWidget(buttons);
  dialog->resize(760, 640);
  return dialog;
}

void showHelp(QWidget* parent) {
  makeHelpDialog(parent)->show();
}

void showAbout(QWidget* parent) {
  QMessageBox::about(parent, QObject::tr("About Partita"), aboutHtml());
}

} // namespace partita::gui
