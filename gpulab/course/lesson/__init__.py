"""What every lesson uses (every notebook, 00-13 and A1).

The lesson's first call (``setup``), interpretations written per device (``narrate``), parts that need an optional
package (``optional``), the learner's predictions (``prediction``), published figures beside the learner's
(``published``), exercise checks and measured challenges (``checks``, and ``exercise_checks`` for lessons 06, 08 and
09), the hourly price of the cost columns (``pricing``), TensorFlow and Keras started the same way everywhere
(``keras``), the reference models (``models``), the plain training step and loop (``loop``), several configurations
trained side by side (``runs``) and the energy read around each timed step (``step_energy``). It imports the toolkit
and nothing else of the course: every other part may import it.
"""
